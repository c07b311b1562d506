package storetest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// SQLHarness is the harness of a database/sql store on db, whose default
// outbox table is migrated: newStore builds a store of the dialect with
// the given clock, configured to delete delivered events or not.
func SQLHarness(t *testing.T, db *sql.DB, newStore func(clock outbox.Clock, deleteDone bool) (*outbox.Store[*sql.Tx], error)) Harness[*sql.Tx] {
	clock := clocktest.New(Start)
	store, err := newStore(clock, false)
	require.NoError(t, err)
	deleteDone, err := newStore(clock, true)
	require.NoError(t, err)
	return Harness[*sql.Tx]{
		Store:      store,
		DeleteDone: deleteDone,
		Clock:      clock,
		Tx: TxFuncs[*sql.Tx]{
			Begin:    func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) },
			Commit:   func(_ context.Context, tx *sql.Tx) error { return tx.Commit() },
			Rollback: func(_ context.Context, tx *sql.Tx) error { return tx.Rollback() },
		},
		Exec: func(ctx context.Context, tx *sql.Tx, query string) error {
			_, err := tx.ExecContext(ctx, query)
			return err
		},
		Count: func(t *testing.T) int {
			var n int
			require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM outbox_event`).Scan(&n))
			return n
		},
		CorruptHeaders: func(t *testing.T, id string) {
			res, err := db.ExecContext(t.Context(), `UPDATE outbox_event SET headers = '{"a": 1}' WHERE event_id = ?`, id)
			require.NoError(t, err)
			n, err := res.RowsAffected()
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
		},
	}
}
