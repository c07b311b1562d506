package mysql_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/testmysql"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// TestCheckNamesTheMigrationToRun: a table never migrated, or migrated
// by an older wmoutbox, fails Check with ErrNotMigrated and the fix; a
// claim on a missing table says the same.
func TestCheckNamesTheMigrationToRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := testmysql.New(t)

	store, err := mysql.NewStore(db, mysql.Config{})
	require.NoError(t, err)
	require.NoError(t, store.Check(ctx))

	missing, err := mysql.NewStore(db, mysql.Config{Table: "never_migrated"})
	require.NoError(t, err)
	err = missing.Check(ctx)
	require.ErrorIs(t, err, outbox.ErrNotMigrated)
	require.EqualError(t, err, "mysql: check: table never_migrated does not exist: run mysql.Migrate or `wmoutbox migrate up`")
	_, err = missing.Driver().Claim(ctx, &outboxdriver.ClaimParams{Topic: "t", Owner: "o", Now: time.Now(), LockedUntil: time.Now().Add(time.Minute), Limit: 1})
	require.ErrorIs(t, err, outbox.ErrNotMigrated)
	require.EqualError(t, err, "mysql: claim: table never_migrated does not exist: run mysql.Migrate or `wmoutbox migrate up`")

	cfg := mysql.Config{Table: "behind_event"}
	require.NoError(t, mysql.Migrate(ctx, db, cfg))
	migrations, err := mysql.Migrations(cfg)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `DELETE FROM wmoutbox_migration WHERE table_name = 'behind_event' AND version > 2`)
	require.NoError(t, err)
	behind, err := mysql.NewStore(db, cfg)
	require.NoError(t, err)
	err = behind.Check(ctx)
	require.ErrorIs(t, err, outbox.ErrNotMigrated)
	require.EqualError(t, err, fmt.Sprintf("mysql: check: table behind_event is at migration 2, this wmoutbox needs %d: run mysql.Migrate or `wmoutbox migrate up`",
		migrations[len(migrations)-1].Version))
}
