package watermilladapter_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// recordingMetrics counts what the relay reports.
type recordingMetrics struct {
	mu        sync.Mutex
	counts    map[string]int
	latencies []time.Duration
	pending   int64
	dead      map[string]int64 // the last DEAD count by topic
	unserved  map[string]int64 // the last unserved count by topic
	handled   []handled
}

// handled is a handler's answer and how long it took.
type handled struct {
	ack bool
	d   time.Duration
}

func (m *recordingMetrics) add(name string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.counts == nil {
		m.counts = map[string]int{}
	}
	m.counts[name] += n
}

func (m *recordingMetrics) get(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[name]
}

func (m *recordingMetrics) HotEnqueued(string)           { m.add("hot", 1) }
func (m *recordingMetrics) HotDropped(string)            { m.add("dropped", 1) }
func (m *recordingMetrics) ColdEnqueued(_ string, n int) { m.add("cold", n) }
func (m *recordingMetrics) Failed(string)                { m.add("failed", 1) }
func (m *recordingMetrics) Dead(string)                  { m.add("dead", 1) }
func (m *recordingMetrics) AddQueueDepths(_ string, hot, cold int) {
	m.add("depths", 1)
	m.add("hot depth", hot)
	m.add("cold depth", cold)
}
func (m *recordingMetrics) Delivered(_ string, d time.Duration) {
	m.add("delivered", 1)
	m.mu.Lock()
	m.latencies = append(m.latencies, d)
	m.mu.Unlock()
}
func (m *recordingMetrics) StoreError(_, operation string) { m.add("store error "+operation, 1) }
func (m *recordingMetrics) DeadEvents(topic string, n int64) {
	m.add("dead events", 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead == nil {
		m.dead = map[string]int64{}
	}
	m.dead[topic] = n
}

func (m *recordingMetrics) lastDead(topic string) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.dead[topic]
	return n, ok
}

func (m *recordingMetrics) Purged(kind string, rows int64) { m.add("purged "+kind, int(rows)) }

func (m *recordingMetrics) Unserved(topic string, pending int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unserved == nil {
		m.unserved = map[string]int64{}
	}
	m.unserved[topic] = pending
}

func (*recordingMetrics) LogSlot(string, int64, time.Duration) {}

// lastUnserved returns the last unserved count of topic, and whether one
// was reported.
func (m *recordingMetrics) lastUnserved(topic string) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.unserved[topic]
	return n, ok
}
func (m *recordingMetrics) Handled(_ string, ack bool, d time.Duration) {
	if ack {
		m.add("handled ack", 1)
	} else {
		m.add("handled nack", 1)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.handled = append(m.handled, handled{ack: ack, d: d})
}

func (m *recordingMetrics) Backlog(_ string, pending int64, _ time.Duration) {
	m.add("backlog", 1)
	m.mu.Lock()
	m.pending = pending
	m.mu.Unlock()
}

func TestMetricsFollowDeliveries(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	m := &recordingMetrics{}
	var calls sync.Map
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{
		Metrics: m,
		// The backlog and DEAD reads share one interval as their bound: on
		// a loaded machine a shorter one lets every count time out, and
		// the DEAD count keeps its first value.
		BacklogInterval: 250 * time.Millisecond,
		RetryPolicy:     outbox.Backoff{Base: time.Millisecond, MaxAttempts: 2, NoJitter: true},
	}, relaytest.Handlers{"orders": func(msg *message.Message) error {
		if string(msg.Payload) == "poison" {
			return errors.New("cannot parse")
		}
		calls.Store(msg.UUID, true)
		return nil
	}})
	r.Publish(t, "orders", newMsg("ok"))
	r.Publish(t, "orders", newMsg("poison"))
	relaytest.Eventually(t, "one delivered, one dead", func() bool { return m.get("delivered") == 1 && m.get("dead") == 1 })
	require.Equal(t, 2, m.get("hot"), "both went to the hot path")
	require.Equal(t, 1, m.get("failed"), "the poison event failed once before dying")
	require.Equal(t, 1, m.get("cold"), "its retry came through the cold path")
	require.Equal(t, 1, m.get("handled ack"), "handler answers")
	require.Equal(t, 2, m.get("handled nack"), "handler answers")
	m.mu.Lock()
	require.Positive(t, m.latencies[0])
	m.mu.Unlock()
	relaytest.Eventually(t, "backlog reported empty", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.counts["backlog"] > 1 && m.pending == 0
	})
	relaytest.Eventually(t, "the DEAD event counted in the table", func() bool {
		n, _ := m.lastDead("orders")
		return n == 1
	})
	require.Positive(t, m.get("depths"))
}

// The handler's time runs on the subscriber's clock, from the message
// handed over to its Ack or Nack.
func TestHandlerDurationOnTheSubscribersClock(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	m := &recordingMetrics{}
	// One worker: a message is handed over once the one before is
	// answered, so that each handler's time is its own.
	relaytest.StartOnClock(t, pool, clock, watermilladapter.SubscriberConfig{
		Metrics: m, WorkerCount: 1, BacklogInterval: time.Hour,
		RetryPolicy: outbox.Backoff{MaxAttempts: 1},
	}, relaytest.Handlers{"orders": func(msg *message.Message) error {
		if string(msg.Payload) == "slow" {
			clock.Advance(3 * time.Second)
			return nil
		}
		clock.Advance(2 * time.Second)
		return errors.New("rejected")
	}}).Publish(t, "orders", newMsg("slow"), newMsg("rejected"))
	relaytest.Eventually(t, "both answered", func() bool { return m.get("handled ack")+m.get("handled nack") == 2 })
	m.mu.Lock()
	defer m.mu.Unlock()
	require.Equal(t, []handled{{ack: true, d: 3 * time.Second}, {ack: false, d: 2 * time.Second}}, m.handled)
}

// The queue depths of two subscriptions of one topic add up, and a
// subscription that stops takes back what it reported: its events went
// back to the table.
func TestQueueDepthsAddUpAndStopWithTheSubscriptions(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	m := &recordingMetrics{}
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{
		Metrics: m, WorkerCount: 1, BacklogInterval: 10 * time.Millisecond, DrainTimeout: 10 * time.Millisecond,
		AllowSharedTopic: true,
	}, nil)
	// Nobody reads: each subscription's worker holds one event, and the
	// rest wait in its hot queue.
	for range 2 {
		_, err := r.Sub.Subscribe(t.Context(), "orders")
		require.NoError(t, err)
	}
	msgs := make([]*message.Message, 10)
	for i := range msgs {
		msgs[i] = newMsg("queued")
	}
	r.Publish(t, "orders", msgs...)
	relaytest.Eventually(t, "8 events in the hot queues", func() bool { return m.get("hot depth") == 8 })

	require.NoError(t, r.Sub.Close())
	require.Zero(t, m.get("hot depth"), "after Close")
	require.Zero(t, m.get("cold depth"), "after Close")
}

// backlogCounter counts the backlog queries and DEAD counts of the driver
// it wraps.
type backlogCounter struct {
	outboxdriver.Driver[pgx.Tx]
	queries atomic.Int64
}

func (d *backlogCounter) Backlog(ctx context.Context, topic string) (int64, time.Time, error) {
	d.queries.Add(1)
	return d.Driver.Backlog(ctx, topic)
}

func (d *backlogCounter) CountDead(ctx context.Context, f outboxdriver.DeadFilter) (int64, error) {
	d.queries.Add(1)
	return d.Driver.CountDead(ctx, f)
}

// Without Metrics nobody reads the backlog or counts the DEAD events, so
// nothing counts them.
func TestNoBacklogQueriesWithoutMetrics(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, nil)
	counter := &backlogCounter{Driver: r.Store.Driver()}
	store := storeOn(t, counter, nil)
	var none *recordingMetrics // a typed nil is no metrics either
	for _, metrics := range []outbox.Metrics{nil, none, &recordingMetrics{}} {
		sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
			Metrics: metrics, BacklogInterval: time.Millisecond, PollInterval: 10 * time.Millisecond, DrainTimeout: 10 * time.Millisecond,
		})
		require.NoError(t, err)
		_, err = sub.Subscribe(t.Context(), "orders")
		require.NoError(t, err)
		// One claim comes after the subscription started observing.
		r.Publish(t, "orders", newMsg("claimed"))
		relaytest.Eventually(t, "claimed", func() bool {
			var n int
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event WHERE locked_by IS NOT NULL`).Scan(&n))
			return n > 0
		})
		require.NoError(t, sub.Close())
		if metrics, ok := metrics.(*recordingMetrics); ok && metrics != nil {
			require.Positive(t, counter.queries.Load(), "with metrics")
		} else {
			require.Zero(t, counter.queries.Load(), "with %T", metrics)
		}
		_, err = pool.Exec(t.Context(), `DELETE FROM outbox_event`)
		require.NoError(t, err)
	}
}

// A cold event's latency counts from when it became due, not from its
// write: an event replayed or scheduled long after its write was not late
// by that much.
func TestColdLatencyCountsFromTheDueTime(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	m := &recordingMetrics{}
	r := relaytest.StartOnClock(t, pool, clock, watermilladapter.SubscriberConfig{Metrics: m},
		relaytest.Handlers{"orders": func(*message.Message) error { return nil }})
	e := orderEvent("x")
	e.DeliverAfter = clock.Now().Add(5 * time.Second)
	writeCold(t, r.Store, e)
	_, err := pool.Exec(t.Context(), `UPDATE outbox_event SET created_at = created_at - interval '1 hour'`)
	require.NoError(t, err)
	relaytest.AdvanceUntil(t, clock, 100*time.Millisecond, "delivered", func() bool { return m.get("delivered") == 1 })
	m.mu.Lock()
	defer m.mu.Unlock()
	require.Less(t, m.latencies[0], 30*time.Minute, "written an hour before it was due")
}
