package watermilladapter_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// recordingMetrics counts what the relay reports.
type recordingMetrics struct {
	mu        sync.Mutex
	counts    map[string]int
	latencies []time.Duration
	pending   int64
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
func (m *recordingMetrics) QueueDepths(string, int, int) { m.add("depths", 1) }
func (m *recordingMetrics) Delivered(_ string, d time.Duration) {
	m.add("delivered", 1)
	m.mu.Lock()
	m.latencies = append(m.latencies, d)
	m.mu.Unlock()
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
		Metrics:         m,
		BacklogInterval: 20 * time.Millisecond,
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
	m.mu.Lock()
	require.Positive(t, m.latencies[0])
	m.mu.Unlock()
	relaytest.Eventually(t, "backlog reported empty", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.counts["backlog"] > 1 && m.pending == 0
	})
	require.Positive(t, m.get("depths"))
}
