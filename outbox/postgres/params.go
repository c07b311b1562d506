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
type array[E any] []E

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

// text is an element of a text or varchar array.
type text string

// TextValue implements [pgtype.TextValuer].
func (t *text) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*t), Valid: true}, nil
}

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

// timestamptz is an element of a timestamptz array.
type timestamptz time.Time

// TimestamptzValue implements [pgtype.TimestamptzValuer].
func (t *timestamptz) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: time.Time(*t), Valid: true}, nil
}
