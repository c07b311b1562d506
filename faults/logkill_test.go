//go:build faults

package faults

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

const logKills = 10

// logKill is one kill of the slot's reader: the victim, the standby that
// took over, when the victim died and the survivor first delivered (the
// database's clock), and the slot's confirmed position just before the
// kill.
type logKill struct {
	victim, survivor string
	killed, resumed  time.Time
	confirmed        string
}

// TestLogRelayKilled kills the relay reading the slot with SIGKILL ten
// times while writers write and a standby relay waits, starting a new
// standby after each takeover. The standby takes the slot over and streams
// again what the victim had not confirmed. Nothing is lost; an event is
// delivered again only when a victim delivered it past the slot's
// confirmed position. The figure to read is the printed takeover line.
func TestLogRelayKilled(t *testing.T) {
	t.Parallel()
	lt := newLogRelayTest(t, "log-kill")
	active, ws := lt.startUnderLoad(t, "log-kill-00")
	started := time.Now()
	standby := lt.startRelay(t, "log-kill-01")

	kills := make([]logKill, 0, logKills)
	for kill := 1; kill <= logKills; kill++ {
		lt.waitStandingBy(t, standby)
		// Mid-stream: once the reader has confirmed a position of its own
		// (it streams again first what its predecessor left), after a
		// random number of further deliveries, spread over about one
		// status interval.
		from := lt.confirmed(t)
		waitFor(t, active.owner+" confirming", 30*time.Second, func() (bool, string) {
			var moved bool
			if err := lt.pool.QueryRow(t.Context(), `SELECT confirmed_flush_lsn > $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`,
				lt.slot, from).Scan(&moved); err != nil {
				return false, err.Error()
			}
			return moved, fmt.Sprintf("confirmed position %s; writers %s; %s", from, ws, logTail(active))
		})
		var delivered int
		require.NoError(t, lt.pool.QueryRow(t.Context(), `SELECT count(*) FROM fault_delivered WHERE by_relay = $1`, active.owner).Scan(&delivered))
		target := delivered + 1 + rand.IntN(300)
		waitFor(t, active.owner+" delivering", 30*time.Second, func() (bool, string) {
			var n int
			if err := lt.pool.QueryRow(t.Context(), `SELECT count(*) FROM fault_delivered WHERE by_relay = $1`, active.owner).Scan(&n); err != nil {
				return false, err.Error()
			}
			return n >= target, fmt.Sprintf("%d of %d deliveries; writers %s; %s", n, target, ws, active.output())
		})
		// Read before the kill, the position can only be behind the one
		// the victim died with: the events it delivered past it include
		// all it may have left unconfirmed.
		k := logKill{victim: active.owner, survivor: standby.owner, confirmed: lt.confirmed(t)}
		active.kill(t)
		k.killed = lt.now(t)
		k.resumed = lt.waitDeliveryAfter(t, standby.owner, k.killed, 30*time.Second, func() string {
			reader, _ := lt.reader(t.Context())
			return fmt.Sprintf("writers %s; reader %q; %s", ws, reader, logTail(standby))
		})
		kills = append(kills, k)
		// The next standby starts once the takeover is over, so that the
		// standby that waited is the one timed.
		active, standby = standby, lt.startRelay(t, fmt.Sprintf("log-kill-%02d", kill+1))
	}
	ws.stop()
	elapsed := time.Since(started)

	f := lt.l.waitDelivered(t, 60*time.Second)
	active.stop(t)
	standby.stop(t)
	st, err := outboxState(t.Context(), lt.pool)
	require.NoError(t, err)

	// In flight at a kill: what the victim delivered past the slot's
	// confirmed position (by the position just after each commit), or
	// whose position is unknown.
	inFlightAt := make(map[string]int) // event id -> kills it was in flight at
	var (
		inFlight, again []int64
		bound           int64
		takeover        []time.Duration
	)
	for _, k := range kills {
		rows, err := lt.pool.Query(t.Context(), `
SELECT DISTINCT d.event_id FROM fault_delivered d LEFT JOIN fault_commits c USING (event_id)
WHERE d.by_relay = $1 AND (c.lsn IS NULL OR c.lsn > $2::pg_lsn)`, k.victim, k.confirmed)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for _, id := range ids {
			inFlightAt[id]++
		}
		var n int64
		require.NoError(t, lt.pool.QueryRow(t.Context(), `SELECT count(DISTINCT event_id) FROM fault_delivered
WHERE event_id = ANY($1) AND by_relay <> $2 AND at > $3`, ids, k.victim, k.killed).Scan(&n))
		inFlight = append(inFlight, int64(len(ids)))
		again = append(again, n)
		bound += int64(len(ids))
		takeover = append(takeover, k.resumed.Sub(k.killed))
	}
	// Each delivery beyond an event's first needs a kill it was in flight
	// at.
	rows, err := lt.pool.Query(t.Context(), `SELECT event_id, count(*) FROM fault_delivered GROUP BY event_id HAVING count(*) > 1`)
	require.NoError(t, err)
	var unexplained []string
	for rows.Next() {
		var (
			id         string
			deliveries int
		)
		require.NoError(t, rows.Scan(&id, &deliveries))
		if deliveries-1 > inFlightAt[id] {
			unexplained = append(unexplained, fmt.Sprintf("%s delivered %d times, in flight at %d kills", id, deliveries, inFlightAt[id]))
		}
	}
	require.NoError(t, rows.Err())

	slices.Sort(takeover)
	p50, p99 := percentile(takeover, 50), percentile(takeover, 99)
	t.Logf("log relay takeover after SIGKILL: p50 %.2f s, p99 %.2f s", p50.Seconds(), p99.Seconds())
	t.Logf("log relay killed: %d duplicates; per kill, in flight %v, delivered again %v; %.0f events/s written", f.duplicates, inFlight, again,
		float64(ws.events.Load())/elapsed.Seconds())
	lt.l.report(t, f, 1, logKills, fmt.Sprintf("in_flight_at_kills=%d takeover_p50=%s takeover_p99=%s takeover_max=%s",
		bound, p50.Round(10*time.Millisecond), p99.Round(10*time.Millisecond), takeover[len(takeover)-1].Round(10*time.Millisecond)),
		fmt.Sprintf("unrecorded_positions=%d writer_failures=%d", lt.unrecorded.Load(), ws.failures.Load()))

	require.Empty(t, unexplained, "events delivered again without having been in flight at a kill")
	requireRecoveredFromKills(t, f, st, bound, inFlight)
}
