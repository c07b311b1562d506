package designs_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/forward"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outboxtest"
	"github.com/wmoutbox/wmoutbox/prommetrics"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// docs/coming-from.md, "PENDING / PUBLISHED / FAILED: a logistics
// service's plan": backoff 1 s · 2^retry_count and FAILED (DEAD) after 5
// retries, the metrics their alerts watch under our names, the event id on
// the message, their operator queries, and their crash row: what a dead
// worker held goes to another within seconds.

// logisticsConfig is the relay of their settings table, with the metrics
// of their metrics table.
func logisticsConfig(metrics outbox.Metrics) watermilladapter.SubscriberConfig {
	return watermilladapter.SubscriberConfig{
		RetryPolicy: outbox.Backoff{Base: time.Second, MaxAttempts: 6, NoJitter: true},
		Metrics:     metrics,
	}
}

// logistics starts their relay, publishing each event to the broker, and
// returns it with the registry its metrics are on. hold, when not nil,
// runs before each publish: a slow broker.
func logistics(t *testing.T, kafka *broker, hold func(*message.Message)) (*relay, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	metrics, err := prommetrics.New(reg, prommetrics.Config{})
	require.NoError(t, err)
	fwd, err := forward.Handler(forward.Config{Publisher: kafka})
	require.NoError(t, err)
	handler := fwd
	if hold != nil {
		handler = func(msg *message.Message) error {
			hold(msg)
			return fwd(msg)
		}
	}
	r := startRelay(t, kafka.clock, logisticsConfig(metrics), map[string]message.NoPublishHandlerFunc{"shipments": handler})
	// The relay reads the backlog as it starts: the series exist from then on.
	requireMetric(t, reg, "outbox_pending_events", 0)
	return r, reg
}

func shipmentEvent(t *testing.T, eventType outbox.EventType, shipmentID string) outbox.Envelope {
	t.Helper()
	return jsonEvent(t, eventType, "shipments", "Shipment", shipmentID, map[string]string{"shipmentId": shipmentID})
}

// Backoff 1 s · 2^retry_count, FAILED after 5 retries; the alert on the
// count of FAILED.
func TestLogisticsRetryScheduleAndAlerts(t *testing.T) {
	t.Parallel()
	kafka := newBroker(outboxtest.NewClock(time.Now()), true)
	r, reg := logistics(t, kafka, nil)
	// increase(outbox_dead_total[5m]) sees the first DEAD event only if
	// the series was there before it, at 0.
	requireMetric(t, reg, "outbox_dead_total", 0)

	id := r.write(t, shipmentEvent(t, "ShipmentDispatched", watermill.NewUUID()))[0]
	r.requireSchedule(t, id, []time.Duration{
		time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
	}, kafka.publishes, errBrokerDown.Error())

	requireMetric(t, reg, "outbox_failures_total", 5)
	requireMetric(t, reg, "outbox_dead_total", 1)
	n, err := r.store.CountDead(t.Context(), outbox.DeadFilter{})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.EqualValues(t, 1, r.count(t, `SELECT count(*) FROM outbox_event WHERE status = 3`))
}

// Their pending count, oldest age and latency, under our names: the
// pending count rises with events written and falls once they are
// delivered, and each message carries the event id.
func TestLogisticsBacklogMetrics(t *testing.T) {
	t.Parallel()
	kafka := newBroker(outboxtest.NewClock(time.Now()), false)
	held := make(chan struct{}, 3)
	release := make(chan struct{})
	r, reg := logistics(t, kafka, func(*message.Message) {
		held <- struct{}{}
		<-release
	})
	releaseAll := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseAll) // before the relay closes, should the test fail

	written := r.clock.Now()
	ids := r.write(t,
		shipmentEvent(t, "ShipmentCreated", watermill.NewUUID()),
		shipmentEvent(t, "ShipmentCreated", watermill.NewUUID()),
		shipmentEvent(t, "ShipmentCreated", watermill.NewUUID()))
	for range ids {
		select {
		case <-held:
		case <-time.After(waitLimit):
			t.Fatal("the events did not reach the broker")
		}
	}
	// The next backlog read, BacklogInterval (15 s) on.
	r.clock.Advance(watermilladapter.DefaultBacklogInterval)
	requireMetric(t, reg, "outbox_pending_events", 3)
	requireMetric(t, reg, "outbox_oldest_pending_age_seconds", r.clock.Now().Sub(written).Seconds())

	releaseAll()
	r.drain(t)
	requireMetric(t, reg, "outbox_delivered_total", 3)
	// From the commit to the broker's acknowledgement, 15 s each.
	count, sum := histogram(t, reg, "outbox_delivery_latency_seconds")
	require.EqualValues(t, 3, count)
	require.InDelta(t, 45, sum, 1e-9)
	r.clock.Advance(watermilladapter.DefaultBacklogInterval)
	requireMetric(t, reg, "outbox_pending_events", 0)
	requireMetric(t, reg, "outbox_oldest_pending_age_seconds", 0)

	// "Message body must include id as messageId": the outbox_event_id
	// header, and the message UUID of an event written by a Writer.
	got := kafka.received()
	require.Len(t, got, len(ids))
	for _, msg := range got {
		require.Contains(t, ids, msg.Metadata.Get(watermilladapter.MetadataEventID))
		require.Equal(t, msg.Metadata.Get(watermilladapter.MetadataEventID), msg.UUID)
	}
}

// Their operator queries, as the page gives ours, on a table with an
// event of each kind: pending and due, pending and scheduled for later,
// held by a relay, failed once, delivered, FAILED.
func TestLogisticsQueries(t *testing.T) {
	t.Parallel()
	// The queries compare with the database's now(): the relay's clock
	// runs two minutes behind it, so that what the relay made due is due
	// by now() as well, and its claims (5 minutes) still hold.
	kafka := newBroker(outboxtest.NewClock(time.Now().Add(-2*time.Minute)), true)
	holding := make(chan struct{})
	release := make(chan struct{})
	r, _ := logistics(t, kafka, func(msg *message.Message) {
		if msg.Metadata.Get(watermilladapter.MetadataEventType) == "ShipmentHeld" {
			close(holding)
			<-release
		}
	})
	t.Cleanup(func() { close(release) })
	shipment := watermill.NewUUID()
	next := func() { r.clock.Advance(time.Millisecond) } // created_at apart

	failed := r.write(t, shipmentEvent(t, "ShipmentLost", watermill.NewUUID()))[0]
	r.untilDead(t, failed, 16*time.Second)
	next()
	retried := r.write(t, shipmentEvent(t, "ShipmentDelayed", shipment))[0]
	r.drain(t) // RETRY, due a second later
	kafka.setDown(false)
	next()
	published := r.write(t, shipmentEvent(t, "ShipmentCreated", shipment))[0]
	r.drain(t)
	next()
	later := shipmentEvent(t, "ShipmentDue", shipment)
	later.DeliverAfter = r.clock.Now().Add(time.Hour)
	scheduled := r.write(t, later)[0]
	next()
	heldID := r.write(t, shipmentEvent(t, "ShipmentHeld", shipment))[0]
	<-holding

	require.ElementsMatch(t, []string{retried, heldID},
		r.ids(t, `SELECT * FROM outbox_event WHERE status IN (0, 2) AND available_at <= now()`))
	require.Equal(t, []string{retried},
		r.ids(t, `SELECT * FROM outbox_event WHERE status IN (0, 2) AND available_at <= now() AND (locked_until IS NULL OR locked_until <= now())`))
	require.EqualValues(t, 1, r.count(t, `SELECT count(*) FROM outbox_event WHERE status = 3`))
	n, err := r.store.CountDead(t.Context(), outbox.DeadFilter{})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, []string{retried, published, scheduled, heldID},
		r.ids(t, `SELECT * FROM outbox_event WHERE aggregate_type = $1 AND aggregate_id = $2 ORDER BY created_at`, "Shipment", shipment))
	// The payload, bytea, read as JSON.
	var got string
	require.NoError(t, r.pool.QueryRow(t.Context(),
		`SELECT convert_from(payload, 'UTF8')::jsonb ->> 'shipmentId' FROM outbox_event WHERE event_id = $1`, published).Scan(&got))
	require.Equal(t, shipment, got)
}

// errRelayDied is what the publish of a relay that died returns, once
// the test lets it return.
var errRelayDied = errors.New("the relay died during the publish")

// Their crash row: "the lock goes with the connection, the row is picked
// up at once". Two relays of the service with the default heartbeat; one
// claims an event and dies in its publish: its database connections are
// cut and its publish never returns. The other delivers the event
// HeartbeatTimeout plus HeartbeatInterval after the dead relay's last
// heartbeat, and not before; while the first lives, it keeps the event
// past that time, its publish still running.
func TestLogisticsCrashRecovery(t *testing.T) {
	t.Parallel()
	kafka := newBroker(outboxtest.NewClock(time.Now()), false)
	clock := kafka.clock
	fwd, err := forward.Handler(forward.Config{Publisher: kafka})
	require.NoError(t, err)
	survivor := startRelay(t, clock, logisticsConfig(nil), map[string]message.NoPublishHandlerFunc{"shipments": fwd})

	// The relay that dies runs on a pool of its own, whose connections the
	// test cuts: each statement then fails, as from a process that is gone.
	var cut atomic.Bool
	poolCfg := survivor.pool.Config()
	poolCfg.PrepareConn = func(context.Context, *pgx.Conn) (bool, error) {
		if cut.Load() {
			return false, errConnectionCut
		}
		return true, nil
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), poolCfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	held := make(chan string, 1)
	release := make(chan struct{})
	dying := startRelayOn(t, pool, clock, logisticsConfig(nil), map[string]message.NoPublishHandlerFunc{
		"shipments": func(msg *message.Message) error {
			held <- msg.Metadata.Get(watermilladapter.MetadataEventID)
			<-release
			return errRelayDied
		},
	})
	// Before it closes, the dead relay comes back: its late Nack changes
	// nothing, and it closes cleanly.
	t.Cleanup(func() {
		cut.Store(false)
		close(release)
	})

	start := clock.Now()
	id := dying.write(t, shipmentEvent(t, "ShipmentDispatched", watermill.NewUUID()))[0]
	select {
	case got := <-held:
		require.Equal(t, id, got)
	case <-time.After(waitLimit):
		t.Fatal("the event did not reach the first relay's publish")
	}
	stillHeld := func(when string) {
		t.Helper()
		e := survivor.get(t, id)
		require.Equal(t, outbox.StatusNew, e.Status, when)
		require.Equal(t, dying.sub.Owner(), e.LockedBy, when)
		require.Empty(t, kafka.publishes(), when)
	}

	timeout := watermilladapter.DefaultHeartbeatTimeout
	interval := watermilladapter.DefaultHeartbeatInterval
	for clock.Now().Before(start.Add(timeout + interval)) {
		heartbeat(t, clock)
		stillHeld("alive, with a publish that takes " + clock.Now().Sub(start).String())
	}
	lastBeat := clock.Now()
	cut.Store(true)
	for clock.Now().Before(lastBeat.Add(timeout)) {
		heartbeat(t, clock)
		stillHeld(clock.Now().Sub(lastBeat).String() + " after the last heartbeat")
	}
	released := heartbeat(t, clock)
	require.Equal(t, lastBeat.Add(timeout+interval), released)
	// The survivor's poll may fall due with the release and claim just
	// before it: the wake-up then waits out the WakeCooldown, which a
	// clock that stands still never ends.
	atOnce := clock.Advance(watermilladapter.DefaultWakeCooldown)
	survivor.drain(t)
	published := kafka.publishes()
	require.Len(t, published, 1, "published once")
	require.WithinRange(t, published[0], released, atOnce, "published at the release")
	got := kafka.received()
	require.Len(t, got, 1)
	require.Equal(t, id, got[0].Metadata.Get(watermilladapter.MetadataEventID))
	e := survivor.get(t, id)
	require.Equal(t, outbox.StatusDone, e.Status)
	require.WithinRange(t, e.DoneAt, released, atOnce)
}

// errConnectionCut is what the statements of a relay whose database
// connections the test cut return.
var errConnectionCut = errors.New("connection to the database cut by the test")

// heartbeat moves clock to the next heartbeat of the two relays of
// TestLogisticsCrashRecovery, which beat together, and waits until both
// have beaten (and handed back what a dead relay held) and wait for the
// next; it returns the clock's time.
func heartbeat(t *testing.T, clock *outboxtest.Clock) time.Time {
	t.Helper()
	waitForHeartbeats(t, clock)
	now := clock.Advance(watermilladapter.DefaultHeartbeatInterval)
	waitForHeartbeats(t, clock)
	return now
}

func waitForHeartbeats(t *testing.T, clock *outboxtest.Clock) {
	t.Helper()
	// No other timer of the relays is armed for a HeartbeatInterval: polls
	// wait 5 s, failed claims 50 ms doubling up to the poll interval.
	if !clock.WaitForTimersOf(2, watermilladapter.DefaultHeartbeatInterval, waitLimit) {
		t.Fatalf("the relays do not wait for their heartbeats; the clock's timers: %v", clock.Armed())
	}
}

// requireMetric waits until the series name{topic="shipments"} (or the
// only series of name) of reg has value want: the relay reports some of
// them a moment after what they count.
func requireMetric(t *testing.T, reg *prometheus.Registry, name string, want float64) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, found := metricValue(t, reg, name)
		assert.True(c, found, "no series %s", name)
		assert.Equal(c, want, got, name)
	}, waitLimit, 5*time.Millisecond)
}

// metricValue returns the value of a counter or gauge series of reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) (float64, bool) {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// histogram returns the sample count and sum of a histogram of reg.
func histogram(t *testing.T, reg *prometheus.Registry, name string) (uint64, float64) {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	t.Fatalf("no series %s", name)
	return 0, 0
}
