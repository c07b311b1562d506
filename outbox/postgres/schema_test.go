package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// TestCheckNamesTheMigrationToRun: a table never migrated, or migrated
// by an older wmoutbox, fails Check with ErrNotMigrated and the fix; a
// claim on a missing table says the same.
func TestCheckNamesTheMigrationToRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)

	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	require.NoError(t, store.Check(ctx))

	missing, err := postgres.NewStore(pool, postgres.Config{Table: "never_migrated"})
	require.NoError(t, err)
	err = missing.Check(ctx)
	require.ErrorIs(t, err, outbox.ErrNotMigrated)
	require.EqualError(t, err, "postgres: check: table never_migrated does not exist: run postgres.Migrate or `wmoutbox migrate up`")

	_, err = missing.Driver().Claim(ctx, &outboxdriver.ClaimParams{Topic: "t", Owner: "o", Now: time.Now(), LockedUntil: time.Now().Add(time.Minute), Limit: 1})
	require.ErrorIs(t, err, outbox.ErrNotMigrated)
	require.EqualError(t, err, "postgres: claim: table never_migrated does not exist: run postgres.Migrate or `wmoutbox migrate up`")
	var notMigrated *outbox.NotMigratedError
	require.ErrorAs(t, err, &notMigrated)
	require.Error(t, notMigrated.Err, "the database's error is kept")

	cfg := postgres.Config{Table: "behind_event"}
	require.NoError(t, postgres.Migrate(ctx, pool, cfg))
	migrations, err := postgres.Migrations(cfg)
	require.NoError(t, err)
	latest := migrations[len(migrations)-1].Version
	_, err = pool.Exec(ctx, `DELETE FROM wmoutbox_migration WHERE table_name = 'behind_event' AND version > 2`)
	require.NoError(t, err)
	behind, err := postgres.NewStore(pool, cfg)
	require.NoError(t, err)
	err = behind.Check(ctx)
	require.ErrorIs(t, err, outbox.ErrNotMigrated)
	require.EqualError(t, err, fmt.Sprintf("postgres: check: table behind_event is at migration 2, this wmoutbox needs %d: run postgres.Migrate or `wmoutbox migrate up`", latest))
}
