package main

import (
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// testServer returns the PostgreSQL server of TEST_DATABASE_URL (default:
// the local one), skipping the test when it does not answer, except under
// CI=true.
func testServer(t *testing.T) string {
	t.Helper()
	server := envOr("TEST_DATABASE_URL", defaultDatabaseURL)
	conn, err := pgx.Connect(t.Context(), server)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL at TEST_DATABASE_URL unreachable: %v", err)
		}
		t.Skipf("PostgreSQL unreachable (set TEST_DATABASE_URL): %v", err)
	}
	require.NoError(t, conn.Close(t.Context()))
	return server
}

// testPool returns a pool on a database of the test's own, dropped at
// cleanup.
func testPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	db, err := createDatabase(t.Context(), testServer(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.drop()) })
	pool, err := db.pool(t.Context())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// TestRunsEveryScenario runs the whole program at a tiny size: it keeps
// the benchmark working, and checks that it leaves nothing behind.
func TestRunsEveryScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every scenario; skipped with -short")
	}
	server := testServer(t)
	tiny := sizes{reps: 1, writes: 100, drain: 500, hotDrain: 500, latencyEvents: 50, kafka: 500, retention: time.Second}
	name, err := run(context.Background(), server, tiny, "", true, nil)
	require.NoError(t, err)

	conn, err := pgx.Connect(t.Context(), server)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var left bool
	require.NoError(t, conn.QueryRow(t.Context(),
		`SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&left))
	require.False(t, left, "the program drops its database %s", name)
}

// TestRawTableIsLikeTheOutboxTable: the raw limits run on a table of the
// outbox table's shape, with its indexes and its storage parameters (the
// fill factor decides where a row's new versions go), and the migrated
// table it was made from is gone.
func TestRawTableIsLikeTheOutboxTable(t *testing.T) {
	pool := testPool(t)
	ctx := t.Context()
	outbox, drop, err := freshTable(ctx, pool, "bench_shape")
	require.NoError(t, err)
	defer drop()
	raw, dropRaw, err := rawTable(ctx, pool)
	require.NoError(t, err)
	defer dropRaw()

	shape := func(table string) (params, indexes []string) {
		name := pgx.Identifier{table}.Sanitize()
		require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = to_regclass($1)`,
			name).Scan(&params))
		rows, err := pool.Query(ctx, `SELECT indkey::text || ' where ' || coalesce(pg_get_expr(indpred, indrelid), '')
			FROM pg_index WHERE indrelid = to_regclass($1) ORDER BY 1`, name)
		require.NoError(t, err)
		indexes, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return params, indexes
	}
	wantParams, wantIndexes := shape(outbox.Table)
	params, indexes := shape(raw)
	require.Contains(t, wantParams, "fillfactor=50")
	require.Equal(t, wantParams, params)
	require.Len(t, wantIndexes, 8) // the primary key, due, finished, aggregate, dead group, dead, idempotency key and aggregate-by-time indexes
	require.Equal(t, wantIndexes, indexes)

	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname ~ '^bench_like_[0-9a-f]+$'`).Scan(&left))
	require.Zero(t, left, "the table the raw table was made like is dropped")
	_, err = pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{raw}.Sanitize()+
		" (event_id, event_type, topic, payload, occurred_at, available_at, created_at, updated_at) VALUES ('1', 'T', 't', '\\x00', now(), now(), now(), now())")
	require.NoError(t, err, "the raw table's defaults work without that table")
}

// The memory scenario's relay process ends when the program that started
// it does: its standard input, a pipe from the parent, ends then.
func TestUntilEOFEndsWithItsInput(t *testing.T) {
	r, w := io.Pipe()
	ctx, cancel := untilEOF(t.Context(), r)
	defer cancel()
	require.NoError(t, ctx.Err(), "the input is still open")
	require.NoError(t, w.Close())
	select {
	case <-ctx.Done():
		require.ErrorContains(t, context.Cause(ctx), "the bench program is gone")
	case <-time.After(10 * time.Second):
		t.Fatal("the context outlived its input")
	}
}

// The memory scenario's relay process reports its figures on stdout, in
// the form the program reads back.
func TestMemoryReportReadsBack(t *testing.T) {
	want := memoryReport{peakRSSKB: 34_816, drain: 18_812_345_678, duplicates: 2}
	got, err := parseMemoryReport(want.String())
	require.NoError(t, err)
	require.Equal(t, want, got)
	_, err = parseMemoryReport("peak_rss_kb=1\n")
	require.Error(t, err)
}

// -only chooses scenarios by name; -quick has no memory scenario, so
// "-quick -only memory" is refused instead of printing an empty table.
func TestOnlySelectsScenariosThatRun(t *testing.T) {
	require.Equal(t, scenarios, selected("", fullSizes))
	require.Equal(t, []string{"write", "drain", "latency", "kafka", "retention"}, selected("", quickSizes))
	require.Equal(t, []string{"drain"}, selected("drain", quickSizes))
	require.Equal(t, []string{"memory"}, selected("mem", fullSizes))
	require.Empty(t, selected("memory", quickSizes))
	require.ErrorContains(t, noScenario("memory", true), "-quick skips the memory scenario")
	require.ErrorContains(t, noScenario("disk", false), `-only "disk" selects none of the scenarios write, drain, latency, kafka, memory, retention`)
	// Only a run with rows of the log relay has the server made ready for
	// them, which may restart it.
	require.True(t, needsLog("", quickSizes))
	require.True(t, needsLog("drain", quickSizes))
	require.False(t, needsLog("kafka", quickSizes))
	require.False(t, needsLog("ret", fullSizes))
}
