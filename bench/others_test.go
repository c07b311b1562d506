package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestOthersWatchSeesOnlyOtherClients: a transaction another client holds
// open, in another database, is seen; one of the program's own pools is
// not.
func TestOthersWatchSeesOnlyOtherClients(t *testing.T) {
	ctx := t.Context()
	server := testServer(t)
	db, err := createDatabase(ctx, server)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.drop()) })
	pool, err := db.pool(ctx)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	holdXID := func(tx pgx.Tx) (pid int32) {
		require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid() FROM (SELECT pg_current_xact_id()) AS x").Scan(&pid))
		return pid
	}
	ownTx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = ownTx.Rollback(context.Background()) }()
	own := holdXID(ownTx)

	other, err := pgx.Connect(ctx, server)
	require.NoError(t, err)
	defer other.Close(context.Background())
	theirTx, err := other.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = theirTx.Rollback(context.Background()) }()
	theirs := holdXID(theirTx)

	o := &othersWatch{pool: pool, self: db.name, seen: map[int32]otherTx{}}
	require.NoError(t, o.look(ctx))
	require.Contains(t, o.seen, theirs)
	require.NotContains(t, o.seen, own)
}

func TestOthersLine(t *testing.T) {
	require.Equal(t, "other transactions on the server: none seen during the run", othersLine(nil, nil))
	line := othersLine(map[int32]otherTx{
		7: {database: "shop", age: 1500 * time.Millisecond},
		9: {database: "crm", age: 12 * time.Second},
	}, nil)
	require.Contains(t, line, "WARNING: 2 session(s)")
	require.Contains(t, line, `at least 12.0 s (pid 9, database "crm")`)
	require.Contains(t, othersLine(nil, errors.New("permission denied")), "not watched to the end of the run (permission denied)")
}
