package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// The inbox of a table in a schema of one's own lives beside that table;
// the conformance suite (storetest) tests the inbox itself.
func TestInboxBesideATableInASchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)
	cfg := postgres.Config{Schema: "shop", Table: "events"}
	_, err := pool.Exec(ctx, `CREATE SCHEMA shop`)
	require.NoError(t, err)
	require.NoError(t, postgres.Migrate(ctx, pool, cfg))
	store, err := postgres.NewStore(pool, cfg)
	require.NoError(t, err)

	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		first, err := store.MarkProcessed(ctx, tx, "billing", "event-1")
		require.True(t, first)
		return err
	}))
	n, err := store.PurgeProcessed(ctx, time.Nanosecond)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM shop.events_inbox`).Scan(&rows))
	require.Zero(t, rows)
}
