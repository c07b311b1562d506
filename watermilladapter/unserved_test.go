package watermilladapter_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// lostEvent is an event of topic "lost", which no relay serves.
func lostEvent() outbox.Envelope {
	e := outbox.NewBytes("Lost", []byte("x"))
	e.Topic = "lost"
	return e
}

// The pending events of a topic no subscription serves are counted, and
// left pending: another process may serve the topic.
func TestUnservedTopicIsCountedAndLeftPending(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	ids := writeCold(t, store, lostEvent(), lostEvent())
	m := &recordingMetrics{}
	sub, _ := subscribe(t, store, watermilladapter.SubscriberConfig{Metrics: m, BacklogInterval: 50 * time.Millisecond}, "orders")
	relaytest.Eventually(t, "2 unserved events of lost", func() bool {
		n, _ := m.lastUnserved("lost")
		return n == 2
	})
	_, reported := m.lastUnserved("orders")
	require.False(t, reported, "a served topic is not unserved")
	for _, id := range ids {
		require.Equal(t, outbox.StatusNew, statusOf(t, store, id).Status)
	}

	// Served now: back to 0.
	_, err = sub.Subscribe(t.Context(), "lost")
	require.NoError(t, err)
	relaytest.Eventually(t, "lost served", func() bool {
		n, _ := m.lastUnserved("lost")
		return n == 0
	})
}

// With UnroutableAfter, an event of a topic no subscription serves goes
// DEAD once it has waited that long, saying why; a served topic's events
// are delivered as ever.
func TestUnroutableAfterMakesUnservedEventsDead(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	lost := writeCold(t, store, lostEvent())[0]
	writeCold(t, store, orderEvent("a"))
	const after = 300 * time.Millisecond
	start := time.Now()
	_, msgs := subscribe(t, store, watermilladapter.SubscriberConfig{UnroutableAfter: after, BacklogInterval: 50 * time.Millisecond}, "orders")
	nextMessage(t, msgs, "the served topic's event").Ack()
	relaytest.Eventually(t, "the unserved event DEAD", func() bool { return statusOf(t, store, lost).Status == outbox.StatusDead })
	require.GreaterOrEqual(t, time.Since(start), after, "DEAD before UnroutableAfter")
	e := statusOf(t, store, lost)
	require.Equal(t, "no subscription for topic lost within 300ms", e.LastError)
	require.Zero(t, e.Attempts, "no delivery was attempted")
	require.Empty(t, e.LockedBy, "the claim is cleared")
}
