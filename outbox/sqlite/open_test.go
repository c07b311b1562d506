package sqlite_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
)

func TestOpenSetsWALBusyTimeoutAndImmediateTransactions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "outbox.db")
	db, err := sqlite.Open(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })

	var mode string
	var busy int64
	require.NoError(t, db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode))
	require.Equal(t, "wal", mode)
	require.NoError(t, db.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy))
	require.Equal(t, sqlite.BusyTimeout.Milliseconds(), busy)

	// An IMMEDIATE transaction holds the write lock from BEGIN: a second
	// connection that does not wait is refused at once.
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	other, err := sql.Open(sqlite.DriverName, "file:"+path+"?_busy_timeout=0")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, other.Close()) })
	_, err = other.ExecContext(ctx, `CREATE TABLE t (x INTEGER)`)
	require.ErrorContains(t, err, "SQLITE_BUSY")
	require.NoError(t, tx.Rollback())
	_, err = other.ExecContext(ctx, `CREATE TABLE t (x INTEGER)`)
	require.NoError(t, err)
}

func TestOpenMemorySharesOneDatabasePerCall(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := sqlite.Open(ctx, sqlite.Memory)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	require.NoError(t, sqlite.Migrate(ctx, db, sqlite.Config{}))

	// Two connections of the pool at once: the same database.
	a, err := db.Conn(ctx)
	require.NoError(t, err)
	defer a.Close()
	b, err := db.Conn(ctx)
	require.NoError(t, err)
	defer b.Close()
	_, err = a.ExecContext(ctx, `CREATE TABLE orders (id TEXT)`)
	require.NoError(t, err)
	_, err = b.ExecContext(ctx, `INSERT INTO orders VALUES ('o-1')`)
	require.NoError(t, err)
	var n int
	require.NoError(t, a.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&n))
	require.Equal(t, 1, n)

	// Another call: another, empty database.
	other, err := sqlite.Open(ctx, sqlite.Memory)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, other.Close()) })
	require.NoError(t, other.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&n))
	require.Zero(t, n)
}

func TestOpenTakesPathsNotURIs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "a dir?with#odd%20chars")
	require.NoError(t, os.Mkdir(dir, 0o700))
	for _, name := range []string{"x.db?mode=ro", "y#z.db", "100%.db"} {
		path := filepath.Join(dir, name)
		db, err := sqlite.Open(ctx, path)
		require.NoError(t, err, name)
		require.NoError(t, sqlite.Migrate(ctx, db, sqlite.Config{}), name)
		require.NoError(t, db.Close())
		_, err = os.Stat(path)
		require.NoError(t, err, "the file is at the path given, %q", path)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		require.True(t, strings.HasPrefix(e.Name(), "x.db?mode=ro") || strings.HasPrefix(e.Name(), "y#z.db") ||
			strings.HasPrefix(e.Name(), "100%.db"), "unexpected file %q", e.Name())
	}

	_, err = sqlite.Open(ctx, "")
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	_, err = sqlite.Open(ctx, filepath.Join(t.TempDir(), "missing", "dir", "x.db"))
	require.Error(t, err)
}

func TestMigrations(t *testing.T) {
	t.Parallel()

	migrations, err := sqlite.Migrations(sqlite.Config{Table: "t"})
	require.NoError(t, err)
	require.NotEmpty(t, migrations)
	for i, m := range migrations {
		require.Equal(t, i+1, m.Version)
		require.True(t, strings.HasSuffix(m.Name, ".sql"), m.Name)
		require.NotContains(t, m.SQL, "outbox_event", "every occurrence of the default name is replaced")
	}
	first := migrations[0]
	require.Equal(t, "0001_create_outbox_event.sql", first.Name)
	require.Contains(t, first.SQL, `CREATE TABLE "t" (`)
	require.Contains(t, first.SQL, `CREATE INDEX "t_due_idx" ON "t"`)
	require.Contains(t, first.SQL, `CREATE INDEX "t_finished_idx" ON "t"`)
	require.Contains(t, migrations[4].SQL, `CREATE TABLE "t_lease" (`)
	require.Contains(t, migrations[4].SQL, `CREATE INDEX "t_dead_group_idx" ON "t"`)

	migrations, err = sqlite.Migrations(sqlite.Config{})
	require.NoError(t, err)
	require.Contains(t, migrations[0].SQL, `CREATE TABLE "outbox_event" (`)
	require.Contains(t, migrations[0].SQL, `CREATE INDEX "outbox_event_due_idx" ON "outbox_event"`)
}

// TestMigrationsRunWithAnyTool runs the migration files as they are, the
// way another migration tool would, and then uses the table.
func TestMigrationsRunWithAnyTool(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := sqlite.Open(ctx, sqlite.Memory)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	files, err := filepath.Glob("migrations/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		text, err := os.ReadFile(f)
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, string(text))
		require.NoError(t, err, f)
	}
	store, err := sqlite.NewStore(db, sqlite.Config{})
	require.NoError(t, err)
	n, _, err := store.Backlog(ctx, "any")
	require.NoError(t, err)
	require.Zero(t, n)
}
