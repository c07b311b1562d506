//go:build faults

package faults

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

const (
	// scenarioLogOrdered is the ordered relays' child (see
	// orderedSubscriberConfig and orderedHandler) in log mode; envSlot
	// names its slot.
	scenarioLogOrdered = "logordered"
	logOrderedKills    = 5
	logOrderedTarget   = 1500
)

// logOrderedRetry outlasts a takeover: a RETRY the killed reader
// recorded is still pending when the next reader streams the events
// after it.
var logOrderedRetry = outbox.Backoff{Base: time.Second, Max: time.Second, MaxAttempts: 10}

// logOrderedSubscriberConfig is an ordered relay's configuration,
// retrying after logOrderedRetry, for log mode.
func logOrderedSubscriberConfig(owner string) watermilladapter.SubscriberConfig {
	cfg := orderedSubscriberConfig(owner)
	cfg.RetryPolicy = logOrderedRetry
	return cfg
}

// TestLogRelayOrderedKilled runs ordered relays in log mode, a reader and
// a standby, while four writers write events of 10 aggregates, each
// aggregate's in turn, numbered; a tenth of the events fail their first
// delivery (RETRY, due a second later) and a twentieth defer it
// (RetryAfter), which parks their aggregate in the reader. The reader is killed with SIGKILL five
// times, after 1-100 deliveries; the standby takes the slot over, and a
// new standby starts. The aggregates the dead reader had parked have
// events unfinished behind the slot's confirmed position, which no stream
// brings again: the new reader must find them at each aggregate's first
// streamed event and leave the aggregate to the ordered claims. The
// deliveries are checked as TestOrderedRelays checks them: no event's
// first delivery before an Ack of the one before it, no two events of an
// aggregate in handlers at once. The figures say how many deliveries of
// a first attempt came from the log and how many from claims: a parked
// aggregate goes back to the stream once the claims have caught up.
func TestLogRelayOrderedKilled(t *testing.T) {
	t.Parallel()
	began := time.Now()
	lt := newLogRelayTest(t, "log-ordered-killed")
	_, err := lt.pool.Exec(t.Context(), orderedSchema)
	require.NoError(t, err)
	start := func(owner string) *relayProcess {
		return startRelayProcess(t, lt.url, owner, envScenario+"="+scenarioLogOrdered, envSlot+"="+lt.slot)
	}
	reader := start("log-ordered-0")
	lt.waitReading(t, reader)
	standby := start("log-ordered-1")
	lt.waitStandingBy(t, standby)

	store, err := postgres.NewStore(openPool(t, lt.url, 4), postgres.Config{})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	var ws []*writers
	for w := range orderedWriters {
		var aggregates []string
		for a := w; a < orderedAggregates; a += orderedWriters {
			aggregates = append(aggregates, fmt.Sprintf("agg-%02d", a))
		}
		ws = append(ws, startWriters(t, lt.l, writerConfig{
			writers: 1, batch: 5, randomBatch: true, pause: 10 * time.Millisecond, rollbackEvery: 10,
			write: writeOrdered(store, aggregates, putWithWriter(writer)),
		}))
	}
	written := func() int64 {
		var n int64
		for _, w := range ws {
			n += w.events.Load()
		}
		return n
	}

	killedAt := map[string]int64{}
	for kill := 1; kill <= logOrderedKills; kill++ {
		var before int
		require.NoError(t, lt.pool.QueryRow(t.Context(), `SELECT count(*) FROM fault_order_delivery WHERE by_relay = $1`,
			reader.owner).Scan(&before))
		target := before + 1 + rand.IntN(100)
		waitFor(t, reader.owner+" delivering", 30*time.Second, func() (bool, string) {
			var n int
			if err := lt.pool.QueryRow(t.Context(), `SELECT count(*) FROM fault_order_delivery WHERE by_relay = $1`,
				reader.owner).Scan(&n); err != nil {
				return false, err.Error()
			}
			return n >= target, fmt.Sprintf("%d of %d deliveries; %d written; %s", n, target, written(), logTail(reader))
		})
		reader.kill(t)
		killedAt[reader.owner] = time.Now().UnixNano()
		lt.waitReading(t, standby)
		reader, standby = standby, start(fmt.Sprintf("log-ordered-%d", kill+1))
		lt.waitStandingBy(t, standby)
	}
	waitFor(t, fmt.Sprintf("%d events written", logOrderedTarget), 60*time.Second, func() (bool, string) {
		return written() >= logOrderedTarget, fmt.Sprintf("%d written", written())
	})
	for _, w := range ws {
		w.stop()
	}
	f := lt.l.waitDelivered(t, 90*time.Second)
	standby.stop(t)
	reader.stop(t)

	st, err := outboxState(t.Context(), lt.pool)
	require.NoError(t, err)
	events, err := loadOrderWritten(t.Context(), lt.pool)
	require.NoError(t, err)
	deliveries, err := loadOrderDeliveries(t.Context(), lt.pool)
	require.NoError(t, err)
	o := checkOrder(events, deliveries, killedAt)
	var streamed, claimed int64
	require.NoError(t, lt.pool.QueryRow(t.Context(), `
SELECT count(*) FILTER (WHERE source = $1), count(*) FILTER (WHERE source <> $1)
FROM fault_order_delivery WHERE attempt = 1`, watermilladapter.SourceLog).Scan(&streamed, &claimed))
	lt.l.report(t, f, 1, logOrderedKills, fmt.Sprintf("aggregates=%d attempt1_streamed=%d attempt1_claimed=%d",
		orderedAggregates, streamed, claimed), o.String(),
		fmt.Sprintf("seconds=%.1f", time.Since(began).Seconds()))

	require.Zero(t, f.lost, "lost")
	require.Zero(t, f.phantom, "delivered but never committed")
	require.Equal(t, f.events, int64(len(events)), "every committed event numbered")
	require.Equal(t, f.events, st.done, "every committed event is DONE: %s", st)
	require.Zero(t, st.pending+st.claimed+st.dead, "nothing pending, claimed or DEAD: %s", st)
	require.Positive(t, streamed, "events came from the log")
	require.Positive(t, o.retries, "first deliveries failed with an error")
	require.Positive(t, o.deferrals, "first deliveries deferred with RetryAfter")
	require.Zero(t, o.unknown+o.mismatched, "deliveries of unknown events, or with the wrong aggregate or number: %s", o)
	require.Zero(t, o.violations, "first deliveries before the previous event of their aggregate was acked: %s", o)
	require.Zero(t, o.concurrent, "events of one aggregate in handlers at the same time: %s", o)
}
