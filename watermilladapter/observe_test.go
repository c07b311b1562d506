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
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// unreadableBacklog reports a backlog of 3 events, the oldest due at
// oldest, and dead DEAD events, until down is set; then every read fails,
// as in an outage. With deadDown, only the DEAD count fails.
type unreadableBacklog struct {
	instantDriver
	oldest   time.Time
	dead     atomic.Int64
	down     atomic.Bool
	deadDown atomic.Bool

	mu          sync.Mutex
	deadFilters []outboxdriver.DeadFilter
}

func (d *unreadableBacklog) Backlog(context.Context, string) (int64, time.Time, error) {
	if d.down.Load() {
		return 0, time.Time{}, errors.New("database unreachable")
	}
	return 3, d.oldest, nil
}

func (d *unreadableBacklog) CountDead(_ context.Context, f outboxdriver.DeadFilter) (int64, error) {
	d.mu.Lock()
	d.deadFilters = append(d.deadFilters, f)
	d.mu.Unlock()
	if d.down.Load() || d.deadDown.Load() {
		return 0, errors.New("database unreachable")
	}
	return d.dead.Load(), nil
}

// countedDead returns the filters of the DEAD counts read so far.
func (d *unreadableBacklog) countedDead() []outboxdriver.DeadFilter {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]outboxdriver.DeadFilter(nil), d.deadFilters...)
}

// backlogAges records the backlogs and DEAD counts a subscription
// reports, and counts store errors by topic and operation.
type backlogAges struct {
	nopMetrics
	mu          sync.Mutex
	pending     []int64
	ages        []time.Duration
	dead        []int64
	storeErrors map[string]int
}

func (m *backlogAges) DeadEvents(topic string, n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if topic != "orders" {
		n = -1 // not the subscription's topic: fails the tests' comparisons
	}
	m.dead = append(m.dead, n)
}

// lastDead returns how many DEAD counts were reported, and the last.
func (m *backlogAges) lastDead() (reports int, dead int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.dead) == 0 {
		return 0, 0
	}
	return len(m.dead), m.dead[len(m.dead)-1]
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
	driver.dead.Store(2)
	metrics := observeBacklog(t, driver, clock)
	waitForReport := func(after int) (pending int64, age time.Duration) {
		t.Helper()
		var n int
		waitFor(t, "a backlog report", func() bool { n, pending, age = metrics.last(); return n > after })
		return pending, age
	}
	waitForDead := func(after int) (dead int64) {
		t.Helper()
		var n int
		waitFor(t, "a DEAD count report", func() bool { n, dead = metrics.lastDead(); return n > after })
		return dead
	}
	pending, age := waitForReport(0)
	require.EqualValues(t, 3, pending, "read")
	require.Equal(t, time.Second, age, "read")
	require.EqualValues(t, 2, waitForDead(0), "read")
	require.Equal(t, []outboxdriver.DeadFilter{{Topic: "orders"}}, driver.countedDead(), "the topic's DEAD events counted")
	require.Zero(t, metrics.storeErrorsOf("orders backlog"), "store errors before the outage")

	driver.down.Store(true)
	driver.dead.Store(5) // what the table would say, if it could be read
	n, _, _ := metrics.last()
	deadReports, _ := metrics.lastDead()
	clock.Advance(time.Minute) // the observer's next report is due
	pending, age = waitForReport(n)
	require.EqualValues(t, 3, pending, "unreadable for a minute")
	require.Equal(t, time.Minute+time.Second, age, "unreadable for a minute")
	require.EqualValues(t, 2, waitForDead(deadReports), "the last DEAD count, reported again in the outage")
	require.Positive(t, metrics.storeErrorsOf("orders backlog"), "the failed reads counted as store errors")
	require.Zero(t, metrics.storeErrorsOf("orders count_dead"), "no DEAD count tried once the backlog read failed")
}

// A DEAD count that fails counts as a store error of its own, and the last
// count read is reported meanwhile, so that an alert on the DEAD events
// neither fires nor ends on an outage; the backlog is reported as usual.
func TestDeadCountHoldsWhileItCannotBeRead(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(testStart)
	driver := &unreadableBacklog{oldest: clock.Now()}
	driver.dead.Store(2)
	metrics := observeBacklog(t, driver, clock)
	waitFor(t, "a DEAD count", func() bool { n, _ := metrics.lastDead(); return n == 1 })

	driver.deadDown.Store(true)
	driver.dead.Store(5)
	nextReport := func(reports int) {
		t.Helper()
		waitForTimer(t, clock, backlogInterval)
		clock.Advance(backlogInterval)
		waitFor(t, "a DEAD count report", func() bool { n, _ := metrics.lastDead(); return n == reports })
	}
	for reports := 2; reports <= 3; reports++ {
		nextReport(reports)
		_, dead := metrics.lastDead()
		require.EqualValues(t, 2, dead, "the DEAD count last read, in report %d", reports)
	}
	require.Equal(t, 2, metrics.storeErrorsOf("orders count_dead"), "each failed count")
	require.Zero(t, metrics.storeErrorsOf("orders backlog"), "the backlog was read")
	backlogs, pending, _ := metrics.last()
	require.Equal(t, 3, backlogs, "the backlog reported every time")
	require.EqualValues(t, 3, pending)

	driver.deadDown.Store(false)
	nextReport(4)
	_, dead := metrics.lastDead()
	require.EqualValues(t, 5, dead, "read again")
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
	n, dead := metrics.lastDead()
	require.Zero(t, n, "no DEAD count read, yet reports, the last %d", dead)
}
