//go:build faults

package faults

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

const logSlotDrops = 3

// slotDrop is one drop of the slot: when it was dropped, when the relay
// had made it again, and the first delivery after the drop (the
// database's clock).
type slotDrop struct {
	dropped, recreated, resumed time.Time
}

// TestLogSlotDropped drops the slot three times while writers write and a
// relay in log mode delivers: the session reading it is terminated and the
// slot dropped, again until the drop wins the race with the relay's
// reconnection; the last time, a transaction stays open until writers
// have committed while the new slot is being made. The relay makes a new
// slot, which streams only what commits after it is made; the events
// committed meanwhile are claimed from the table. Nothing is lost; the
// figures to read are the printed recovery times, from each drop until
// delivery resumed and until every event committed before the new slot
// had a position was delivered.
func TestLogSlotDropped(t *testing.T) {
	t.Parallel()
	lt := newLogRelayTest(t, "log-slot-dropped")
	relay, ws := lt.startUnderLoad(t, "log-slot-relay")

	var (
		drops    []slotDrop
		attempts int
	)
	for drop := 1; drop <= logSlotDrops; drop++ {
		// Mid-stream: after a random number of deliveries since the last
		// drop.
		var before int
		require.NoError(t, lt.pool.QueryRow(t.Context(), `SELECT count(*) FROM fault_delivered`).Scan(&before))
		target := before + 1 + rand.IntN(300)
		waitFor(t, "deliveries before the drop", 30*time.Second, func() (bool, string) {
			var n int
			if err := lt.pool.QueryRow(t.Context(), `SELECT count(*) FROM fault_delivered`).Scan(&n); err != nil {
				return false, err.Error()
			}
			return n >= target, fmt.Sprintf("%d of %d deliveries; writers %s; %s", n, target, ws, relay.output())
		})
		// The last drop comes while a transaction stays open, as one often
		// does on a busy database: making the new slot waits for it to
		// end, and what the writers commit meanwhile is in no stream.
		var open pgx.Tx
		if drop == logSlotDrops {
			open = lt.openTransaction(t)
		}
		existed, tries, err := lt.dropSlot(t.Context())
		require.NoError(t, err)
		require.True(t, existed, "the relay's slot existed")
		attempts += tries
		dropped := lt.now(t)
		if open != nil {
			waitFor(t, "the relay making the slot again, waiting for the open transaction", 30*time.Second, func() (bool, string) {
				var n int
				if err := lt.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, lt.slot).Scan(&n); err != nil {
					return false, err.Error()
				}
				return n == 1, relay.output()
			})
			commits := ws.commits.Load()
			waitFor(t, "writes while the slot is being made", 30*time.Second, func() (bool, string) {
				return ws.commits.Load() >= commits+10, ws.String()
			})
			require.NoError(t, open.Rollback(t.Context()))
		}

		var recreated time.Time
		waitFor(t, "the relay making the slot again", 30*time.Second, func() (bool, string) {
			var n int
			if err := lt.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_replication_slots
WHERE slot_name = $1 AND confirmed_flush_lsn IS NOT NULL`, lt.slot).Scan(&n); err != nil {
				return false, err.Error()
			}
			return n == 1, relay.output()
		})
		recreated = lt.now(t)
		drops = append(drops, slotDrop{dropped: dropped, recreated: recreated,
			resumed: lt.waitDeliveryAfter(t, "", dropped, 30*time.Second, relay.output)})
	}
	ws.stop()

	f := lt.l.waitDelivered(t, 60*time.Second)
	relay.stop(t)
	// Recovered: every event committed since the slot before was made
	// and before the new one was is delivered. The drops do not wait for
	// it: a relay may lose its slot again while claims deliver what the
	// last loss left.
	var resumed, recovered []time.Duration
	var since time.Time
	for _, d := range drops {
		missing, last, err := lt.committedBetween(t.Context(), since, d.recreated)
		require.NoError(t, err)
		require.Zero(t, missing)
		require.NotNil(t, last)
		resumed = append(resumed, d.resumed.Sub(d.dropped))
		recovered = append(recovered, last.Sub(d.dropped))
		since = d.recreated
	}
	st, err := outboxState(t.Context(), lt.pool)
	require.NoError(t, err)
	var claimed int64
	require.NoError(t, lt.pool.QueryRow(t.Context(), `SELECT count(*) FROM fault_delivered WHERE source <> $1`,
		watermilladapter.SourceLog).Scan(&claimed))
	created := strings.Count(relay.out.String(), "created its slot")

	slices.Sort(resumed)
	slices.Sort(recovered)
	t.Logf("log slot dropped: delivery resumed after p50 %.2f s, max %.2f s; events committed meanwhile delivered after p50 %.2f s, max %.2f s",
		percentile(resumed, 50).Seconds(), resumed[len(resumed)-1].Seconds(),
		percentile(recovered, 50).Seconds(), recovered[len(recovered)-1].Seconds())
	lt.l.report(t, f, 1, logSlotDrops, fmt.Sprintf("claimed_deliveries=%d slots_created=%d drop_attempts=%d resumed_max=%s recovered_max=%s",
		claimed, created, attempts, resumed[len(resumed)-1].Round(10*time.Millisecond), recovered[len(recovered)-1].Round(10*time.Millisecond)),
		fmt.Sprintf("writer_failures=%d", ws.failures.Load()))

	require.Zero(t, f.lost, "lost")
	require.Zero(t, f.phantom, "delivered but never committed")
	require.Positive(t, f.rolledBack, "some transactions rolled back on purpose")
	require.Equal(t, logSlotDrops+1, created, "the relay made its slot at start and after each drop:\n%s", relay.out)
	require.Positive(t, claimed, "events committed while the slot was gone were claimed")
	require.Equal(t, f.events, st.done, "every committed event is DONE: %s", st)
	require.Zero(t, st.pending+st.claimed+st.dead, "nothing pending, claimed or DEAD: %s", st)
	require.Equal(t, f.events, st.total, "no row from a rolled-back transaction: %s", st)
}
