package testdb

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// currentDatabase is the name of the database pool is on.
func currentDatabase(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var name string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT current_database()`).Scan(&name))
	return name
}

func TestNewGivesDistinctMigratedDatabases(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	a, b := New(t), New(t)
	nameA, nameB := currentDatabase(t, a), currentDatabase(t, b)
	require.NotEqual(t, nameA, nameB)
	require.Regexp(t, testName, nameA)
	require.Regexp(t, testName, nameB)

	for _, pool := range []*pgxpool.Pool{a, b} {
		var table *string
		require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass('outbox_event')::text`).Scan(&table))
		require.NotNil(t, table, "outbox_event is missing")
		require.Equal(t, "outbox_event", *table)
	}

	// Separate databases: a table made in one is absent from the other.
	_, err := a.Exec(ctx, `CREATE TABLE only_in_a (id int)`)
	require.NoError(t, err)
	var inB *string
	require.NoError(t, b.QueryRow(ctx, `SELECT to_regclass('only_in_a')::text`).Scan(&inB))
	require.Nil(t, inB)
}

func TestDatabaseIsResetAtCleanup(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	// Also the admin connection: pg_database is shared by every database.
	admin, err := pgx.Connect(ctx, URL(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, admin.Close(context.Background())) })

	var (
		url      string
		leftOpen *pgx.Conn
	)
	t.Run("test", func(t *testing.T) {
		pool := New(t)
		url = pool.Config().ConnConfig.ConnString()
		for _, stmt := range []string{
			`CREATE TABLE left_behind (id int)`,
			`CREATE SCHEMA elsewhere`,
			`CREATE TABLE elsewhere.outbox_event (id int)`,
			`SELECT lo_create(0)`,
			`ALTER DATABASE ` + ident(currentDatabase(t, pool)) + ` SET work_mem = '7MB'`,
			`DELETE FROM outbox_event`,
			`DROP INDEX outbox_event_due_idx`,
		} {
			_, err := pool.Exec(ctx, stmt)
			require.NoError(t, err, stmt)
		}
		// A connection the test forgets to close must not stop the reset.
		var err error
		leftOpen, err = pgx.Connect(ctx, url)
		require.NoError(t, err)
	})
	if leftOpen != nil {
		// Terminated by the reset: closing it only frees the client side.
		t.Cleanup(func() { _ = leftOpen.Close(context.Background()) })
	}
	require.NotEmpty(t, url)
	require.Error(t, leftOpen.Ping(ctx), "the session the test left open outlived its test")

	// The database is reset for the next test, or gone when the reset
	// could not be done or the idle ones are many.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		require.Equal(t, codeUndefinedDatabase, code(err), "neither reset nor dropped: %v", err)
		return
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	var left struct {
		tables, schemas, objects, settings int
		due                                bool
		migrations                         int
	}
	require.NoError(t, conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_tables WHERE tablename = 'left_behind' OR schemaname = 'elsewhere'),
		(SELECT count(*) FROM pg_namespace WHERE nspname = 'elsewhere'),
		(SELECT count(*) FROM pg_largeobject_metadata),
		(SELECT count(*) FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase WHERE d.datname = current_database()),
		to_regclass('outbox_event_due_idx') IS NOT NULL,
		(SELECT count(*) FROM wmoutbox_migration)`).
		Scan(&left.tables, &left.schemas, &left.objects, &left.settings, &left.due, &left.migrations))
	require.Zero(t, left.tables, "tables the test made")
	require.Zero(t, left.schemas, "schemas the test made")
	require.Zero(t, left.objects, "large objects")
	require.Zero(t, left.settings, "database settings")
	require.True(t, left.due, "the migrated schema is back")
	require.Positive(t, left.migrations, "the migrations are recorded")
}

// TestParallelClones asks for more databases at once than the cap, so tests
// wait for slots, clones of the template run side by side, and databases
// reset by ended tests are handed to later ones: never one to two tests at
// once.
func TestParallelClones(t *testing.T) {
	t.Parallel()
	URL(t) // skips here when no server answers, rather than in every subtest

	var mu sync.Mutex
	inUse := map[string]bool{}
	handedOut := 0
	t.Run("group", func(t *testing.T) {
		for i := range 2 * maxLive {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				name := currentDatabase(t, New(t))
				mu.Lock()
				defer mu.Unlock()
				require.False(t, inUse[name], "database %s handed out to two tests at once", name)
				inUse[name], handedOut = true, handedOut+1
				// Before the pool closes and the database is reset.
				t.Cleanup(func() {
					mu.Lock()
					defer mu.Unlock()
					delete(inUse, name)
				})
			})
		}
	})
	require.Equal(t, 2*maxLive, handedOut)
}

func TestURLFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		connString, want string
	}{
		{
			"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
			"postgres://postgres@127.0.0.1:5432/wmoutbox_test_1_2?sslmode=disable",
		},
		{
			"postgresql://u:p%40ss@db.example:6543?sslmode=require",
			"postgresql://u:p%40ss@db.example:6543/wmoutbox_test_1_2?sslmode=require",
		},
		{
			"host=/run/postgresql dbname=postgres user=me",
			"host=/run/postgresql dbname=postgres user=me dbname='wmoutbox_test_1_2'",
		},
	}
	for _, tt := range tests {
		s := &server{connString: tt.connString}
		got := s.urlFor("wmoutbox_test_1_2")
		require.Equal(t, tt.want, got)
		cfg, err := pgx.ParseConfig(got)
		require.NoError(t, err)
		require.Equal(t, "wmoutbox_test_1_2", cfg.Database)
	}
}
