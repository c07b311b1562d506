package postgres

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// BeginPipeline begins the transaction InTx gives its function on pool.
func BeginPipeline(ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, error) {
	tx, _, err := beginPipeline(ctx, pool)
	return tx, err
}

// ClaimStatement is the claim SQL the store runs for one topic, with or
// without a cursor, ordered or not, for tests that read its plan.
func ClaimStatement(s *Store, withCursor, ordered bool) string {
	sql := &s.Driver().(*driver).t.sql
	switch {
	case ordered && withCursor:
		return sql.claimOrderedAfter
	case ordered:
		return sql.claimOrdered
	case withCursor:
		return sql.claimAfter
	}
	return sql.claim
}

// ClaimHeadsStatement is the claim SQL the store runs for the aggregates
// an ordered claim names.
func ClaimHeadsStatement(s *Store) string { return s.Driver().(*driver).t.sql.claimHeads }

// ListenChecked is Listen with the liveness timing a test can wait for:
// a quiet connection is checked every check, a check or a connection
// attempt gives up after timeout.
func ListenChecked(pool *pgxpool.Pool, cfg Config, wake func(topics ...string), check, timeout time.Duration) (*Listener, error) {
	return listenTimed(pool, cfg, wake, listenTiming{check: check, checkTimeout: timeout, connectTimeout: timeout})
}

// SavepointMark is the expression an insert returns as its savepoint mark,
// in terms of the row's xmin and pg_current_xact_id().
const SavepointMark = sqlSavepoint

// The array parameters of the store's batch statements.
type (
	TextArray        = array[text]
	ByteaArray       = array[bytea]
	TimestamptzArray = array[timestamptz]
	Timestamptz      = timestamptz
)

// AggregateStatement is the SQL of an aggregate's events the store runs,
// with a cursor or without, for tests that read its plan.
func AggregateStatement(s *Store, before bool) string {
	if before {
		return s.Driver().(*driver).t.sql.queryAggregateBefore
	}
	return s.Driver().(*driver).t.sql.queryAggregate
}

// CheckWALLevel is what a log feed decides of the server's wal_level.
var CheckWALLevel = checkWALLevel

// DecodeLogRow decodes, as a log feed does, the tuple a table of these
// columns inserted: each value in pgoutput's text, nil for NULL.
func DecodeLogRow(columns []string, values [][]byte) outboxdriver.Row {
	relation := make([]*pglogrepl.RelationMessageColumn, len(columns))
	for i, name := range columns {
		relation[i] = &pglogrepl.RelationMessageColumn{Name: name}
	}
	tuple := make([]tupleColumn, len(values))
	for i, v := range values {
		tuple[i] = tupleColumn{kind: pglogrepl.TupleDataTypeText, data: v}
		if v == nil {
			tuple[i].kind = pglogrepl.TupleDataTypeNull
		}
	}
	return newLogDecoder("", "").row(newLogLayout(relation), tuple)
}

// DecodeLogInsert decodes, as a log feed does, the body of a pgoutput
// Insert message (after its type byte) inside a transaction, for a table
// of these columns whose relation id is 1, and returns the rows decoded.
func DecodeLogInsert(columns []string, body []byte) ([]outboxdriver.Row, error) {
	relation := make([]*pglogrepl.RelationMessageColumn, len(columns))
	for i, name := range columns {
		relation[i] = &pglogrepl.RelationMessageColumn{Name: name}
	}
	d := newLogDecoder("", "")
	d.layouts[1], d.open = newLogLayout(relation), true
	err := d.insert(body)
	return d.rows, err
}
