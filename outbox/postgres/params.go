package postgres

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// array is an array parameter that pgx encodes without an allocation per
// element. pgx hands each element of a slice parameter to the element's
// encoder as an interface value, which for a string, a []byte or a
// time.Time is a copy on the heap: one allocation per event in every batch
// statement. An array hands it a pointer into the slice instead, and the
// element type's valuer method reads through it. A nil array is NULL.
type array[E element] []E

// element is what an array holds: a type with a valuer method pgx calls
// through a pointer, and the array type PostgreSQL knows for it.
type element interface {
	arrayOID() uint32
}

// Dimensions implements [pgtype.ArrayGetter].
func (a array[E]) Dimensions() []pgtype.ArrayDimension {
	if a == nil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

// Index implements [pgtype.ArrayGetter].
func (a array[E]) Index(i int) any { return &a[i] }

// IndexType implements [pgtype.ArrayGetter].
func (a array[E]) IndexType() any { return new(E) }

// TextValue implements [pgtype.TextValuer], for the query modes in which
// pgx does not learn a parameter's type from the server (exec and
// simple_protocol, the usual settings behind PgBouncer): pgx then asks the
// value for its text, which it cannot otherwise find for a type of ours.
// The array's own codec writes it, from the array seen only as an
// [pgtype.ArrayGetter] (seen whole, pgx would call this method again).
func (a array[E]) TextValue() (pgtype.Text, error) {
	if a == nil {
		return pgtype.Text{}, nil
	}
	var e E
	// A Map memoizes plans and is not safe for concurrent use.
	buf, err := pgtype.NewMap().Encode(e.arrayOID(), pgtype.TextFormatCode, struct{ pgtype.ArrayGetter }{a}, nil)
	if err != nil {
		return pgtype.Text{}, err
	}
	return pgtype.Text{String: string(buf), Valid: true}, nil
}

// text is an element of a text or varchar array.
type text string

// TextValue implements [pgtype.TextValuer].
func (t *text) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*t), Valid: true}, nil
}

func (text) arrayOID() uint32 { return pgtype.TextArrayOID }

// textArray copies ss into an array.
func textArray(ss []string) array[text] {
	a := make(array[text], len(ss))
	for i, s := range ss {
		a[i] = text(s)
	}
	return a
}

// bytea is an element of a bytea array; nil is NULL.
type bytea []byte

// BytesValue implements [pgtype.BytesValuer].
func (b *bytea) BytesValue() ([]byte, error) { return *b, nil }

func (bytea) arrayOID() uint32 { return pgtype.ByteaArrayOID }

// timestamptz is an element of a timestamptz array.
type timestamptz time.Time

// TimestamptzValue implements [pgtype.TimestamptzValuer].
func (t *timestamptz) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: time.Time(*t), Valid: true}, nil
}

func (timestamptz) arrayOID() uint32 { return pgtype.TimestamptzArrayOID }
