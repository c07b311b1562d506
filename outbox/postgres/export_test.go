package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BeginPipeline begins the transaction InTx gives its function on pool.
func BeginPipeline(ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, error) {
	tx, _, err := beginPipeline(ctx, pool)
	return tx, err
}

// ClaimStatement is the claim SQL the store runs for one topic, with or
// without a cursor, ordered or not, for tests that read its plan.
func ClaimStatement(s *Store, withCursor, ordered bool) string {
	variants := s.t.sql.claim
	if withCursor {
		variants = s.t.sql.claimAfter
	}
	if ordered {
		return variants[1][1]
	}
	return variants[0][1]
}

// ClaimHeadsStatement is the claim SQL the store runs for the aggregates
// an ordered claim names.
func ClaimHeadsStatement(s *Store) string { return s.t.sql.claimHeads }

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
