//go:build faults

package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/testenv"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// TestLogSlotInvalidated has the server invalidate the relay's slot, as
// max_slot_wal_keep_size does to a slot that holds more WAL than it
// allows, while writers write and a relay in log mode delivers. A
// transaction left open with a record in the log holds the slot's restart
// position back, as a long transaction does; the setting is lowered to
// keep no segment for slots, the WAL is switched past the held position
// and a checkpoint removes it. The server ends the relay's session and
// marks the slot lost; the relay drops it and makes a new one, which
// waits for the open transaction to end. The events committed after the
// old slot's confirmed position and before the new slot are claimed from
// the table. Nothing is lost; the figures to read are the times from the
// checkpoint until delivery resumed and until every event committed
// before the new slot was delivered.
//
// It changes a setting of the whole server and removes WAL that other
// slots may need: it is not parallel, and runs with the server to itself
// (see logrestart_test.go).
func TestLogSlotInvalidated(t *testing.T) {
	lt := newLogRelayTest(t, "log-slot-invalidated")
	requireSuperuser(t, lt.pool)
	relay, ws := lt.startUnderLoad(t, "log-slot-lost-relay")
	lt.waitDeliveries(t, 500, func() string { return fmt.Sprintf("writers %s; %s", ws, relay.output()) })

	// A transactional message puts the open transaction in the slot's
	// reorder buffer: its restart position stays at the message while the
	// confirmed position goes on with the writers' commits.
	hold := lt.openTransaction(t)
	_, err := hold.Exec(t.Context(), `SELECT pg_logical_emit_message(true, 'wmoutbox-faults', 'hold the restart position')`)
	require.NoError(t, err)
	var held string
	require.NoError(t, hold.QueryRow(t.Context(), `SELECT pg_current_wal_insert_lsn()::text`).Scan(&held))
	waitFor(t, "the confirmed position past the open transaction", 30*time.Second, func() (bool, string) {
		var past bool
		var restart, confirmed string
		if err := lt.pool.QueryRow(t.Context(), `
SELECT coalesce(restart_lsn::text, ''), coalesce(confirmed_flush_lsn::text, ''), coalesce(confirmed_flush_lsn > $2::pg_lsn AND restart_lsn < $2::pg_lsn, false)
FROM pg_replication_slots WHERE slot_name = $1`, lt.slot, held).Scan(&restart, &confirmed, &past); err != nil {
			return false, err.Error()
		}
		return past, fmt.Sprintf("held at %s; slot restart %s, confirmed %s", held, restart, confirmed)
	})

	setSlotWALKeep(t, lt.pool, "1MB")
	for range 3 {
		// Each switch begins a segment once something was written since
		// the last one.
		commits := ws.commits.Load()
		waitFor(t, "writes before a WAL switch", 30*time.Second, func() (bool, string) {
			return ws.commits.Load() >= commits+5, ws.String()
		})
		_, err := lt.pool.Exec(t.Context(), `SELECT pg_switch_wal()`)
		require.NoError(t, err)
	}
	_, err = lt.pool.Exec(t.Context(), `CHECKPOINT`)
	require.NoError(t, err)
	invalidated := lt.now(t)
	var status string
	require.NoError(t, lt.pool.QueryRow(t.Context(), `SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1`,
		lt.slot).Scan(&status))
	require.Contains(t, []string{"lost", ""}, status, "the checkpoint invalidated the slot (or the relay dropped it already)")
	waitFor(t, "the relay finding its slot invalidated", 30*time.Second, func() (bool, string) {
		return strings.Contains(relay.out.String(), "finds its slot invalidated"), logTail(relay)
	})
	resetSlotWALKeep(t, lt.pool)

	// The new slot waits for the open transaction; the writers go on
	// meanwhile, and what they commit is in no stream.
	commits := ws.commits.Load()
	waitFor(t, "writes while the new slot waits", 30*time.Second, func() (bool, string) {
		return ws.commits.Load() >= commits+10, ws.String()
	})
	require.NoError(t, hold.Rollback(t.Context()))
	waitFor(t, "the relay making the slot again", 30*time.Second, func() (bool, string) {
		var n int
		if err := lt.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_replication_slots
WHERE slot_name = $1 AND confirmed_flush_lsn IS NOT NULL AND wal_status <> 'lost'`, lt.slot).Scan(&n); err != nil {
			return false, err.Error()
		}
		return n == 1, logTail(relay)
	})
	recreated := lt.now(t)
	resumed := lt.waitDeliveryAfter(t, "", invalidated, 30*time.Second, relay.output)
	commits = ws.commits.Load()
	waitFor(t, "writes on the new slot", 30*time.Second, func() (bool, string) {
		return ws.commits.Load() >= commits+20, ws.String()
	})
	ws.stop()

	f := lt.l.waitDelivered(t, 60*time.Second)
	relay.stop(t)
	missing, last, err := lt.committedBetween(t.Context(), time.Time{}, recreated)
	require.NoError(t, err)
	require.Zero(t, missing)
	require.NotNil(t, last)
	recovered := last.Sub(invalidated)
	var claimed int64
	require.NoError(t, lt.pool.QueryRow(t.Context(), `SELECT count(*) FROM fault_delivered WHERE source <> $1`,
		watermilladapter.SourceLog).Scan(&claimed))
	st, err := outboxState(t.Context(), lt.pool)
	require.NoError(t, err)
	created := strings.Count(relay.out.String(), "created its slot")

	t.Logf("log slot invalidated: delivery resumed %.2f s after the checkpoint, events committed before the new slot delivered after %.2f s; %d deliveries claimed",
		resumed.Sub(invalidated).Seconds(), recovered.Seconds(), claimed)
	lt.l.report(t, f, 1, 1, fmt.Sprintf("claimed_deliveries=%d slots_created=%d resumed=%s recovered=%s",
		claimed, created, resumed.Sub(invalidated).Round(10*time.Millisecond), recovered.Round(10*time.Millisecond)),
		fmt.Sprintf("writer_failures=%d", ws.failures.Load()))

	require.Zero(t, f.lost, "lost")
	require.Zero(t, f.phantom, "delivered but never committed")
	require.Equal(t, 2, created, "the relay made its slot at start and after the invalidation:\n%s", relay.out)
	require.Positive(t, claimed, "events committed while no slot streamed were claimed")
	require.Equal(t, f.events, st.done, "every committed event is DONE: %s", st)
	require.Zero(t, st.pending+st.claimed+st.dead, "nothing pending, claimed or DEAD: %s", st)
	require.Equal(t, f.events, st.total, "no row from a rolled-back transaction: %s", st)
}

// waitDeliveries waits until the ledger has n deliveries.
func (lt *logRelayTest) waitDeliveries(t *testing.T, n int, progress func() string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d deliveries", n), 30*time.Second, func() (bool, string) {
		var got int
		if err := lt.pool.QueryRow(t.Context(), `SELECT count(*) FROM fault_delivered`).Scan(&got); err != nil {
			return false, err.Error()
		}
		return got >= n, fmt.Sprintf("%d deliveries; %s", got, progress())
	})
}

// requireSuperuser skips (fails on CI) unless pool's role may change the
// server's settings and checkpoint.
func requireSuperuser(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var super bool
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super))
	if !super {
		testenv.SkipOrFail(t, "invalidating a slot needs a superuser: ALTER SYSTEM and CHECKPOINT")
	}
}

// setSlotWALKeep sets the server's max_slot_wal_keep_size, reset at
// cleanup: a server left keeping no WAL for slots would invalidate the
// slots of the tests after.
func setSlotWALKeep(t *testing.T, pool *pgxpool.Pool, size string) {
	t.Helper()
	t.Cleanup(func() { resetSlotWALKeep(t, pool) })
	_, err := pool.Exec(t.Context(), `ALTER SYSTEM SET max_slot_wal_keep_size = '`+size+`'`)
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(), `SELECT pg_reload_conf()`)
	require.NoError(t, err)
	waitFor(t, "the setting in force", 10*time.Second, func() (bool, string) {
		var now string
		if err := pool.QueryRow(t.Context(), `SHOW max_slot_wal_keep_size`).Scan(&now); err != nil {
			return false, err.Error()
		}
		return now == size, "max_slot_wal_keep_size is " + now
	})
}

func resetSlotWALKeep(t *testing.T, pool *pgxpool.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, `ALTER SYSTEM RESET max_slot_wal_keep_size`); err != nil {
		t.Errorf("reset max_slot_wal_keep_size: %v", err)
		return
	}
	if _, err := pool.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		t.Errorf("reload the server's configuration: %v", err)
	}
}
