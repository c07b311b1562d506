//go:build faults

package faults

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// Liveness decides when a claim is abandoned. With the Subscriber's
// default HeartbeatInterval, HeartbeatTimeout and LockTimeout, a killed
// relay's claims are delivered by another within seconds, a live relay
// keeps its claims through handlers longer than the heartbeat timeout,
// and a database outage causes no duplicate beyond the handlers it
// interrupted.

const (
	// scenarioLiveness is the child relay of TestRecoveryAfterSIGKILL
	// (see livenessSubscriberConfig and livenessHandler).
	scenarioLiveness = "liveness"
	livenessTopic    = "liveness"
	// livenessHandlerTime is how long the killed relays' handler takes,
	// so that they hold claims in flight when they are killed.
	livenessHandlerTime = 50 * time.Millisecond
	livenessKills       = 15
)

// livenessSubscriberConfig is TestRecoveryAfterSIGKILL's relays': the
// crash relays' queues, and every liveness setting at its default.
func livenessSubscriberConfig(owner string) watermilladapter.SubscriberConfig {
	return watermilladapter.SubscriberConfig{
		Owner:             owner,
		WorkerCount:       crashWorkers,
		ColdQueueCapacity: crashColdQueue,
		BatchSize:         crashBatch,
		PollInterval:      crashPollInterval,
	}
}

// livenessHandler records a delivery by owner, once it has taken
// livenessHandlerTime; the ledger's row gets the database's time.
func livenessHandler(pool *pgxpool.Pool, owner string) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		select {
		case <-time.After(livenessHandlerTime):
		case <-msg.Context().Done():
			return msg.Context().Err()
		}
		return recordDelivered(msg.Context(), pool, msg.Metadata.Get(watermilladapter.MetadataEventID), owner)
	}
}

// killSample is one kill: the victim, when it died by the database's
// clock, and the events it held.
type killSample struct {
	owner  string
	killed time.Time
	held   []string
}

// TestRecoveryAfterSIGKILL kills relay processes with SIGKILL while they
// hold claims, one every couple of seconds while writers write and a
// survivor relay runs, and measures for each event a victim held the time
// from the kill to its delivery by another relay. Nothing is lost; the
// figure to read is the printed recovery line.
func TestRecoveryAfterSIGKILL(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	pool := openPool(t, url, 6)
	l := newLedger(t, pool, "liveness-kill")
	timeDeliveries(t, pool)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)

	ws := startWriters(t, l, writerConfig{
		writers: 2, batch: 5, randomBatch: true, pause: 40 * time.Millisecond, rollbackEvery: 10,
		write: writeWithWriter(store, writer, livenessTopic),
	})
	survivor := startRelayProcess(t, url, "liveness-survivor", envScenario+"="+scenarioLiveness)

	var kills []killSample
	for kill := 1; kill <= livenessKills; kill++ {
		owner := fmt.Sprintf("liveness-victim-%02d", kill)
		victim := startRelayProcess(t, url, owner, envScenario+"="+scenarioLiveness)
		target := 1 + rand.IntN(50)
		waitFor(t, owner+" delivering with claims in flight", 30*time.Second, func() (bool, string) {
			var delivered, held int
			if err := pool.QueryRow(t.Context(), `SELECT
    (SELECT count(*) FROM fault_delivered WHERE by_relay = $1),
    (SELECT count(*) FROM outbox_event WHERE locked_by = $1 AND status IN (0, 2))`, owner).Scan(&delivered, &held); err != nil {
				return false, err.Error()
			}
			return delivered >= target && held > 0, fmt.Sprintf("%d of %d deliveries, %d held; writers %s; %s",
				delivered, target, held, ws, victim.output())
		})
		victim.kill(t)
		s := killSample{owner: owner}
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT clock_timestamp()`).Scan(&s.killed))
		rows, err := pool.Query(t.Context(), `SELECT event_id FROM outbox_event WHERE locked_by = $1 AND status IN (0, 2)`, owner)
		require.NoError(t, err)
		for rows.Next() {
			var id string
			require.NoError(t, rows.Scan(&id))
			s.held = append(s.held, id)
		}
		require.NoError(t, rows.Err())
		kills = append(kills, s)
	}
	ws.stop()

	f := l.waitDelivered(t, 90*time.Second)
	survivor.stop(t)
	st, err := outboxState(t.Context(), pool)
	require.NoError(t, err)

	var (
		recovery []time.Duration
		bound    int64
		inFlight []int64
	)
	// An event a later victim claimed and held at its own kill was killed
	// twice: its recovery counts from the last kill that held it.
	lastKill := make(map[string]int)
	for i, s := range kills {
		for _, id := range s.held {
			lastKill[id] = i
		}
	}
	for i, s := range kills {
		bound += int64(len(s.held))
		inFlight = append(inFlight, int64(len(s.held)))
		rows, err := pool.Query(t.Context(), `
SELECT h.id, min(d.at) - $3 FROM unnest($1::text[]) AS h(id)
JOIN fault_delivered d ON d.event_id = h.id AND d.by_relay <> $2 AND d.at > $3
GROUP BY h.id`, s.held, s.owner, s.killed)
		require.NoError(t, err)
		n := 0
		for rows.Next() {
			var (
				id string
				d  time.Duration
			)
			require.NoError(t, rows.Scan(&id, &d))
			if lastKill[id] == i {
				recovery = append(recovery, d)
			}
			n++
		}
		require.NoError(t, rows.Err())
		require.Equal(t, len(s.held), n, "%s: every event it held delivered by another relay after the kill", s.owner)
	}
	require.NotEmpty(t, recovery)
	slices.Sort(recovery)
	p50, p99 := percentile(recovery, 50), percentile(recovery, 99)
	t.Logf("recovery after SIGKILL: p50 %.1f s, p99 %.1f s", p50.Seconds(), p99.Seconds())
	l.report(t, f, 1, livenessKills, fmt.Sprintf("in_flight_at_kills=%d recovered_events=%d recovery_p50=%s recovery_p99=%s recovery_max=%s",
		bound, len(recovery), p50.Round(10*time.Millisecond), p99.Round(10*time.Millisecond), recovery[len(recovery)-1].Round(10*time.Millisecond)),
		fmt.Sprintf("writer_failures=%d", ws.failures.Load()))

	requireRecoveredFromKills(t, f, st, bound, inFlight)
}

// percentile returns the p-th percentile of sorted, by the nearest rank.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100
	return sorted[max(rank, 1)-1]
}

// longHandlerTime is three default heartbeat timeouts.
const longHandlerTime = 3 * watermilladapter.DefaultHeartbeatTimeout

// TestLongHandlersKeepTheirClaims runs two relays whose handlers take three
// heartbeat timeouts: neither takes the other's claims, and every event is
// delivered once.
func TestLongHandlersKeepTheirClaims(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	pool := openPool(t, url, 6)
	l := newLedger(t, pool, "liveness-long-handlers")
	const workers, events = 8, 12
	slow := func(by string) message.NoPublishHandlerFunc {
		record := l.handlerFor(by)
		return func(msg *message.Message) error {
			if err := record(msg); err != nil {
				return err
			}
			select {
			case <-time.After(longHandlerTime):
				return nil
			case <-msg.Context().Done():
				return msg.Context().Err()
			}
		}
	}
	relays := make([]*relaytest.Relay, 2)
	for i := range relays {
		by := fmt.Sprint("long-", i)
		relays[i] = relaytest.Start(t, openPool(t, url, 4), watermilladapter.SubscriberConfig{Owner: by, WorkerCount: workers},
			relaytest.Handlers{livenessTopic: slow(by)})
	}
	writer, err := outbox.NewWriter(relays[0].Store, outbox.WriterConfig{})
	require.NoError(t, err)
	write := writeWithWriter(relays[0].Store, writer, livenessTopic)
	for i := range events {
		require.NoError(t, write(t.Context(), []string{fmt.Sprintf("long-%02d", i)}, false))
	}

	f := l.waitDelivered(t, 3*longHandlerTime)
	l.report(t, f, 1, 0, fmt.Sprintf("handler_time=%s", longHandlerTime))
	require.Zero(t, f.lost, "lost")
	require.Zero(t, f.duplicates, "a live relay's claim went to the other relay")
	require.EqualValues(t, events, f.events)
}

// livenessOutage is how long TestDatabaseOutage keeps the database down.
const livenessOutage = 60 * time.Second

// TestDatabaseOutage cuts the database for a minute, far beyond the
// heartbeat timeout, while writers write and two relays with the default
// liveness settings deliver: when it comes back every heartbeat has
// expired, and each relay renews its own for a heartbeat timeout before it
// takes any other for dead. Duplicates are no more than the events whose
// handler was running when the outage began; nothing is lost.
func TestDatabaseOutage(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	pool := openPool(t, url, 6)
	l := newLedger(t, pool, "liveness-outage")
	var running atomic.Int64
	handler := func(by string) message.NoPublishHandlerFunc {
		record := l.handlerFor(by)
		return func(msg *message.Message) error {
			running.Add(1)
			defer running.Add(-1)
			if err := record(msg); err != nil {
				return err
			}
			select {
			case <-time.After(20 * time.Millisecond):
				return nil
			case <-msg.Context().Done():
				return msg.Context().Err()
			}
		}
	}
	relays := make([]*relaytest.Relay, 2)
	for i := range relays {
		by := fmt.Sprint("outage-", i)
		relays[i] = relaytest.Start(t, openPool(t, url, 4), watermilladapter.SubscriberConfig{Owner: by, PollInterval: 50 * time.Millisecond},
			relaytest.Handlers{livenessTopic: handler(by)})
	}
	writer, err := outbox.NewWriter(relays[0].Store, outbox.WriterConfig{})
	require.NoError(t, err)
	ws := startWriters(t, l, writerConfig{
		writers: 2, batch: 5, randomBatch: true, pause: 10 * time.Millisecond, rollbackEvery: 10,
		write: writeWithWriter(relays[0].Store, writer, livenessTopic),
	})
	db := newDatabaseSwitch(t, url)

	waitFor(t, "writes before the outage", 30*time.Second, func() (bool, string) {
		return ws.commits.Load() >= 200, ws.String()
	})
	db.allow(t, false)
	interrupted := running.Load()
	terminated := db.terminate(t)
	time.Sleep(livenessOutage) // the fault itself: the database stays down this long
	db.allow(t, true)
	before := ws.commits.Load()
	waitFor(t, "writes after the outage", 60*time.Second, func() (bool, string) {
		return ws.commits.Load() >= before+200, ws.String()
	})
	ws.stop()

	f := l.waitDelivered(t, 90*time.Second)
	st, err := outboxState(t.Context(), pool)
	require.NoError(t, err)
	t.Logf("database outage of %s: %d duplicates, %d events whose handler was running when it began", livenessOutage, f.duplicates, interrupted)
	l.report(t, f, 1, 1, fmt.Sprintf("outage=%s handlers_running_at_outage=%d backends_terminated=%d writer_failures=%d",
		livenessOutage, interrupted, terminated, ws.failures.Load()))

	require.Positive(t, terminated, "backends were terminated")
	require.Zero(t, f.lost, "lost")
	require.Zero(t, f.phantom, "delivered but never committed")
	require.LessOrEqual(t, f.duplicates, interrupted, "duplicates only of handlers the outage interrupted")
	require.Equal(t, st.total, st.done, "every row DONE, none stuck: %s", st)
}
