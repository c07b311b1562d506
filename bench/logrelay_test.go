package main

import (
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// logPool is testPool on a server that can run a log relay; otherwise it
// skips (fails under CI=true, whose server runs with wal_level = logical).
func logPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := testPool(t)
	if why := logUnavailable(t.Context(), pool); why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("log relay unavailable: %s", why)
		}
		t.Skipf("log relay unavailable: %s", why)
	}
	return pool
}

// openLog makes the table's slot and publication before anything is
// written, so that a backlog written next is in the slot's stream, and
// what it returns drops both.
func TestOpenLogMakesTheSlotAndDropsIt(t *testing.T) {
	pool := logPool(t)
	ctx := t.Context()
	table, drop, err := freshTable(ctx, pool, "bench_log")
	require.NoError(t, err)
	defer drop()
	names := logFeedConfig(table)
	exists := func() (slot, publication bool) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1),
			EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $2)`, names.Slot, names.Publication).Scan(&slot, &publication))
		return slot, publication
	}

	closeLog, err := openLog(ctx, pool, table)
	require.NoError(t, err)
	slot, publication := exists()
	require.True(t, slot, "slot %s made", names.Slot)
	require.True(t, publication, "publication %s made", names.Publication)
	var behind bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT confirmed_flush_lsn <= pg_current_wal_lsn() FROM pg_replication_slots
		WHERE slot_name = $1`, names.Slot).Scan(&behind))
	require.True(t, behind, "what is written next is after the slot's position")

	require.NoError(t, closeLog())
	slot, publication = exists()
	require.False(t, slot, "slot dropped")
	require.False(t, publication, "publication dropped")
}

// tableVersions counts the row versions written by every pool's
// connections, each statement's as soon as it ran, however recently each
// connection last reported its statistics.
func TestTableVersionsCountsEveryConnection(t *testing.T) {
	pool := testPool(t)
	ctx := t.Context()
	table, drop, err := rawTable(ctx, pool)
	require.NoError(t, err)
	defer drop()
	other, err := pgxpool.New(ctx, pool.Config().ConnString())
	require.NoError(t, err)
	defer other.Close()

	name := pgx.Identifier{table}.Sanitize()
	_, err = pool.Exec(ctx, rawSQL(sqlRawFill, table), 10, eventType, outboxTopic, aggregateType, payload(0), rawHeaders(0), time.Now())
	require.NoError(t, err)
	exec := func(p *pgxpool.Pool, sql string) {
		_, err := p.Exec(ctx, sql)
		require.NoError(t, err)
	}
	exec(other, "UPDATE "+name+" SET locked_until = now() WHERE event_id <= lpad('4', 26, '0')") // heap-only: no index holds it
	exec(other, "UPDATE "+name+" SET status = 1 WHERE event_id <= lpad('6', 26, '0')")
	exec(pool, "DELETE FROM "+name+" WHERE event_id > lpad('8', 26, '0')")

	v, err := tableVersions(ctx, pool, table, 10, other)
	require.NoError(t, err)
	require.NotNil(t, v)
	require.Equal(t, rowVersions{inserted: 1, updated: 1, hot: 0.4, deleted: 0.2}, *v)
	require.InDelta(t, 2.2, v.total(), 1e-9)
}

// postgresCPU reads the CPU time of the server's processes on this
// machine, and of no other process.
func TestPostgresCPUReadsServerProcesses(t *testing.T) {
	pool := testPool(t)
	if !onThisMachine(pool.Config().ConnConfig.Host) {
		t.Skip("the server is on another machine")
	}
	var backend int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&backend))
	cpu, ok := postgresCPU(backend)
	require.True(t, ok, "backend %d", backend)
	require.GreaterOrEqual(t, cpu, time.Duration(0))
	_, ok = postgresCPU(os.Getpid())
	require.False(t, ok, "this test is not PostgreSQL")
}
