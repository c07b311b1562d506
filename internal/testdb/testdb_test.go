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

func TestDatabaseIsDroppedAtCleanup(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	// Also the admin connection: pg_database is shared by every database.
	admin, err := pgx.Connect(ctx, URL(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, admin.Close(context.Background())) })

	exists := func(t *testing.T, name string) bool {
		t.Helper()
		var ok bool
		require.NoError(t, admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&ok))
		return ok
	}

	var (
		name     string
		leftOpen *pgx.Conn
	)
	t.Run("test", func(t *testing.T) {
		pool := New(t)
		name = currentDatabase(t, pool)
		require.True(t, exists(t, name))

		// A connection the test forgets to close must not stop the drop.
		var err error
		leftOpen, err = pgx.Connect(ctx, pool.Config().ConnConfig.ConnString())
		require.NoError(t, err)
	})
	if leftOpen != nil {
		// Terminated by the drop: closing it only frees the client side.
		t.Cleanup(func() { _ = leftOpen.Close(context.Background()) })
	}
	require.NotEmpty(t, name)
	require.False(t, exists(t, name), "database %s outlived its test", name)
}

// TestParallelClones asks for more databases at once than the cap, so tests
// wait for slots and clones of the template run side by side.
func TestParallelClones(t *testing.T) {
	t.Parallel()
	URL(t) // skips here when no server answers, rather than in every subtest

	var mu sync.Mutex
	seen := map[string]bool{}
	t.Run("group", func(t *testing.T) {
		for i := range 2 * maxLive {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				name := currentDatabase(t, New(t))
				mu.Lock()
				defer mu.Unlock()
				require.False(t, seen[name], "database %s handed out twice", name)
				seen[name] = true
			})
		}
	})
	require.Len(t, seen, 2*maxLive)
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
