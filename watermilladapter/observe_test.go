package watermilladapter

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
)

// unreadableBacklog reports a backlog of 3 events, the oldest due at
// oldest, until down is set; then every read fails, as in an outage.
type unreadableBacklog struct {
	instantDriver
	oldest time.Time
	down   atomic.Bool
}

func (d *unreadableBacklog) Backlog(context.Context, string) (int64, time.Time, error) {
	if d.down.Load() {
		return 0, time.Time{}, errors.New("database unreachable")
	}
	return 3, d.oldest, nil
}

// backlogAges records the backlogs a subscription reports, and counts
// store errors by topic and operation.
type backlogAges struct {
	nopMetrics
	mu          sync.Mutex
	pending     []int64
	ages        []time.Duration
	storeErrors map[string]int
}

func (m *backlogAges) StoreError(topic, operation string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.storeErrors == nil {
		m.storeErrors = map[string]int{}
	}
	m.storeErrors[topic+" "+operation]++
}

func (m *backlogAges) storeErrorsOf(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.storeErrors[key]
}

func (m *backlogAges) Backlog(_ string, pending int64, age time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pending = append(m.pending, pending)
	m.ages = append(m.ages, age)
}

func (m *backlogAges) last() (reports int, pending int64, age time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.ages) == 0 {
		return 0, 0, 0
	}
	return len(m.ages), m.pending[len(m.pending)-1], m.ages[len(m.ages)-1]
}

// backlogInterval is how often observeBacklog's subscription reports.
const backlogInterval = 5 * time.Millisecond

// observeBacklog subscribes to "orders" on driver, on clock, and returns
// what the subscription reports every backlogInterval of the clock.
func observeBacklog(t *testing.T, driver *unreadableBacklog, clock *clocktest.Clock) *backlogAges {
	t.Helper()
	metrics := &backlogAges{}
	subscribeOrders(t, driver, SubscriberConfig{Metrics: metrics, BacklogInterval: backlogInterval, Clock: clock, PollInterval: time.Hour})
	return metrics
}

// While the backlog cannot be read, the age of the oldest pending event
// goes on growing from the last one seen, instead of staying frozen at the
// last value read: an alert on it must fire during an outage. Each failed
// read counts as a store error.
func TestBacklogAgeGrowsWhileTheBacklogCannotBeRead(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(testStart)
	driver := &unreadableBacklog{oldest: clock.Now().Add(-time.Second)}
	metrics := observeBacklog(t, driver, clock)
	waitForReport := func(after int) (pending int64, age time.Duration) {
		t.Helper()
		var n int
		waitFor(t, "a backlog report", func() bool { n, pending, age = metrics.last(); return n > after })
		return pending, age
	}
	pending, age := waitForReport(0)
	require.EqualValues(t, 3, pending, "read")
	require.Equal(t, time.Second, age, "read")
	require.Zero(t, metrics.storeErrorsOf("orders backlog"), "store errors before the outage")

	driver.down.Store(true)
	n, _, _ := metrics.last()
	clock.Advance(time.Minute) // the observer's next report is due
	pending, age = waitForReport(n)
	require.EqualValues(t, 3, pending, "unreadable for a minute")
	require.Equal(t, time.Minute+time.Second, age, "unreadable for a minute")
	require.Positive(t, metrics.storeErrorsOf("orders backlog"), "the failed reads counted as store errors")
}

// A subscription that starts while the database is down has read no
// backlog: it reports none, rather than "0 pending, 0 s old", which would
// overwrite a real measurement and silence the alert on the age.
func TestNoBacklogReportedBeforeARead(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(testStart)
	driver := &unreadableBacklog{oldest: clock.Now().Add(-time.Hour)}
	driver.down.Store(true)
	metrics := observeBacklog(t, driver, clock)
	for reads := 1; reads <= 3; reads++ {
		waitFor(t, "a failed read", func() bool { return metrics.storeErrorsOf("orders backlog") == reads })
		waitForTimer(t, clock, backlogInterval)
		clock.Advance(backlogInterval)
	}
	n, pending, age := metrics.last()
	require.Zero(t, n, "no backlog read, yet reports, the last %d pending, oldest %s old", pending, age)
}
