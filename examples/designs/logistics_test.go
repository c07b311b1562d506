package designs_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
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
// the message, and their operator queries. Their crash row ("picked up at
// once") is not checked here: with the defaults a dead relay's claims wait
// out the lease, which the relay heartbeats change.

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
