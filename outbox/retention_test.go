package outbox_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/syncbuf"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// waitLimit bounds every wait of the retention tests in real time.
const waitLimit = 10 * time.Second

// A round waits at most the interval and 10%: advancing the clock by
// this much ends every runner's wait.
const nextRound = time.Hour + 6*time.Minute

// purgedMetrics records Purged and StoreError; the other measurements are
// discarded.
type purgedMetrics struct {
	mu          sync.Mutex
	purged      map[string][]int64
	storeErrors []string
}

func (m *purgedMetrics) Purged(kind string, rows int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.purged == nil {
		m.purged = map[string][]int64{}
	}
	m.purged[kind] = append(m.purged[kind], rows)
}

func (m *purgedMetrics) StoreError(topic, operation string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.storeErrors = append(m.storeErrors, topic+"/"+operation)
}

func (m *purgedMetrics) snapshot() (map[string][]int64, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	purged := make(map[string][]int64, len(m.purged))
	for k, v := range m.purged {
		purged[k] = append([]int64(nil), v...)
	}
	return purged, append([]string(nil), m.storeErrors...)
}

func (*purgedMetrics) HotEnqueued(string)                   {}
func (*purgedMetrics) HotDropped(string)                    {}
func (*purgedMetrics) ColdEnqueued(string, int)             {}
func (*purgedMetrics) Delivered(string, time.Duration)      {}
func (*purgedMetrics) Failed(string)                        {}
func (*purgedMetrics) Dead(string)                          {}
func (*purgedMetrics) AddQueueDepths(string, int, int)      {}
func (*purgedMetrics) Backlog(string, int64, time.Duration) {}
func (*purgedMetrics) DeadEvents(string, int64)             {}
func (*purgedMetrics) Handled(string, bool, time.Duration)  {}
func (*purgedMetrics) Unserved(string, int64)               {}
func (*purgedMetrics) LogSlot(string, int64, time.Duration) {}

// runRetain runs Retain with cfg on b's store until the test ends, and
// waits for its first round to end (its wait armed): timers armed before
// it is called count towards the wait.
func runRetain(t *testing.T, b *storeBundle, cfg outbox.RetentionConfig) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	armed := b.clock.Timers()
	done := make(chan error, 1)
	go func() { done <- b.store.Retain(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, "Retain returns nil when its context ends")
		case <-time.After(waitLimit):
			t.Error("Retain did not return after its context ended")
		}
	})
	require.True(t, b.clock.WaitForTimers(armed+1, waitLimit), "the first round ends")
}

// advance moves b's clock to the next round of n runners and waits until
// they finished it.
func advance(t *testing.T, b *storeBundle, n int) {
	t.Helper()
	b.clock.Advance(nextRound)
	require.True(t, b.clock.WaitForTimers(n, waitLimit), "the round ends")
}

// countLog counts the driver's calls of name.
func countLog(b *storeBundle, name string) int {
	n := 0
	for _, call := range b.driver.Log() {
		if call == name {
			n++
		}
	}
	return n
}

// One runner takes the lease at once and every interval, for twice the
// interval, and purges DONE events and inbox records older than 7 days,
// but no DEAD event, by default.
func TestRetainPurgesOnSchedule(t *testing.T) {
	t.Parallel()
	b := setupStore(t, func(d *fakeDriver[*fakeTx]) {
		d.batches = []batchResult{{n: 1000}, {n: 2}, {n: 5}} // DONE: two batches; inbox: one
	})
	metrics := &purgedMetrics{}
	runRetain(t, b, outbox.RetentionConfig{Owner: "me", Metrics: metrics})

	week := 7 * 24 * time.Hour
	require.Equal(t, []string{"acquire lease", "purge batch", "purge batch", "purge processed batch"}, b.driver.Log())
	b.driver.set(func(d *fakeDriver[*fakeTx]) {
		require.Equal(t, []outboxdriver.LeaseParams{{Name: "retention", Owner: "me", Now: storeNow, Until: storeNow.Add(2 * time.Hour)}},
			d.leaseAttempts)
		done := outboxdriver.PurgeParams{Statuses: []int16{int16(outbox.StatusDone)}, Before: storeNow.Add(-week), Limit: 1000}
		require.Equal(t, []outboxdriver.PurgeParams{done, done, {Before: storeNow.Add(-week), Limit: 1000}}, d.purges)
	})
	purged, storeErrors := metrics.snapshot()
	require.Equal(t, map[string][]int64{"done": {1002}, "processed": {5}}, purged)
	require.Empty(t, storeErrors)

	armed := b.clock.Armed()
	require.Len(t, armed, 1)
	require.InDelta(t, float64(time.Hour), float64(armed[0]), float64(6*time.Minute), "the wait is the interval, ±10%")

	advance(t, b, 1)
	require.Equal(t, 2, countLog(b, "acquire lease"))
	require.Equal(t, 3, countLog(b, "purge batch"), "one more, short, batch of DONE events")
	require.Equal(t, 2, countLog(b, "purge processed batch"))
	purged, _ = metrics.snapshot()
	require.Equal(t, map[string][]int64{"done": {1002, 0}, "processed": {5, 0}}, purged)
}

// Two runners on one table: the one that took the lease purges, each
// round; the other does not.
func TestRetainTwoRunnersOneLease(t *testing.T) {
	t.Parallel()
	b := setupStore(t, nil)
	first, second := &purgedMetrics{}, &purgedMetrics{}
	runRetain(t, b, outbox.RetentionConfig{Owner: "first", Metrics: first})
	runRetain(t, b, outbox.RetentionConfig{Owner: "second", Metrics: second})
	for round := 1; round <= 3; round++ {
		require.Equal(t, 2*round, countLog(b, "acquire lease"))
		require.Equal(t, round, countLog(b, "purge batch"), "one runner purges per round")
		require.Equal(t, round, countLog(b, "purge processed batch"))
		purged, _ := first.snapshot()
		require.Len(t, purged["done"], round, "the first runner holds the lease")
		purged, _ = second.snapshot()
		require.Empty(t, purged)
		advance(t, b, 2)
	}
}

// Negative retentions keep DONE events and inbox records; a positive Dead
// purges DEAD events.
func TestRetainOffSwitches(t *testing.T) {
	t.Parallel()
	b := setupStore(t, nil)
	metrics := &purgedMetrics{}
	runRetain(t, b, outbox.RetentionConfig{Done: -1, Processed: -1, Dead: -1, Metrics: metrics})
	require.Equal(t, []string{"acquire lease"}, b.driver.Log(), "nothing to purge")
	purged, _ := metrics.snapshot()
	require.Empty(t, purged)

	b = setupStore(t, nil)
	runRetain(t, b, outbox.RetentionConfig{Done: -1, Processed: -1, Dead: 30 * 24 * time.Hour, BatchSize: 10})
	require.Equal(t, []string{"acquire lease", "purge batch"}, b.driver.Log())
	b.driver.set(func(d *fakeDriver[*fakeTx]) {
		require.Equal(t, []outboxdriver.PurgeParams{{Statuses: []int16{int16(outbox.StatusDead)},
			Before: storeNow.Add(-30 * 24 * time.Hour), Limit: 10}}, d.purges)
	})
}

// A failed step is logged and counted, and the round goes on; the next
// round tries again.
func TestRetainGoesOnAfterFailures(t *testing.T) {
	t.Parallel()
	b := setupStore(t, func(d *fakeDriver[*fakeTx]) {
		d.batches = []batchResult{{err: errors.New("disk full")}, {n: 3}}
	})
	logs := &syncbuf.Buffer{}
	metrics := &purgedMetrics{}
	runRetain(t, b, outbox.RetentionConfig{Metrics: metrics, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.Equal(t, []string{"acquire lease", "purge batch", "purge processed batch"}, b.driver.Log())
	purged, storeErrors := metrics.snapshot()
	require.Equal(t, map[string][]int64{"done": {0}, "processed": {3}}, purged)
	require.Equal(t, []string{"/retention"}, storeErrors)
	require.Contains(t, logs.String(), "purge done failed")
	require.Contains(t, logs.String(), "disk full")

	b.driver.set(func(d *fakeDriver[*fakeTx]) { d.leaseErr = errors.New("connection refused") })
	advance(t, b, 1)
	require.Equal(t, 1, countLog(b, "purge batch"), "no purge without the lease")
	_, storeErrors = metrics.snapshot()
	require.Equal(t, []string{"/retention", "/retention"}, storeErrors)
	require.Contains(t, logs.String(), "take the lease failed")
}

// An invalid configuration fails at once, before any round.
func TestRetainValidation(t *testing.T) {
	t.Parallel()
	for _, cfg := range []outbox.RetentionConfig{
		{Interval: -time.Second},
		{BatchSize: -1},
		{BatchSize: 100001},
		{Owner: strings.Repeat("o", 256)},
		{Owner: "a\x00b"},
	} {
		b := setupStore(t, nil)
		err := b.store.Retain(t.Context(), cfg)
		require.ErrorIs(t, err, outbox.ErrInvalidRequest, "%+v", cfg)
		require.Empty(t, b.driver.Log())
	}
}
