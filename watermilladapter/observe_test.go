package watermilladapter

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// unreadableBacklog reports a backlog of 3 events, the oldest due at
// oldest, until down is set; then every read fails, as in an outage.
type unreadableBacklog struct {
	instantStore
	oldest time.Time
	down   atomic.Bool
}

func (s *unreadableBacklog) Backlog(context.Context, string) (int64, time.Time, error) {
	if s.down.Load() {
		return 0, time.Time{}, errors.New("database unreachable")
	}
	return 3, s.oldest, nil
}

// backlogAges records the backlogs a subscription reports, and counts
// store errors by topic and operation.
type backlogAges struct {
	outbox.NopMetrics
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

// observeBacklog subscribes to "orders" on store, with clock, and returns
// what the subscription reports every 5 ms until the test ends.
func observeBacklog(t *testing.T, store outbox.Store, clock outbox.Clock) *backlogAges {
	t.Helper()
	metrics := &backlogAges{}
	s, err := NewSubscriber(store, SubscriberConfig{Metrics: metrics, BacklogInterval: 5 * time.Millisecond, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Subscribe(t.Context(), "orders"); err != nil {
		t.Fatal(err)
	}
	return metrics
}

// While the backlog cannot be read, the age of the oldest pending event
// goes on growing from the last one seen, instead of staying frozen at the
// last value read: an alert on it must fire during an outage. Each failed
// read counts as a store error.
func TestBacklogAgeGrowsWhileTheBacklogCannotBeRead(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC))
	store := &unreadableBacklog{oldest: clock.Now().Add(-time.Second)}
	metrics := observeBacklog(t, store, clock)
	waitForReport := func(after int) (pending int64, age time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if n, pending, age := metrics.last(); n > after {
				return pending, age
			}
		}
		t.Fatal("no backlog reported")
		return 0, 0
	}
	if pending, age := waitForReport(0); pending != 3 || age != time.Second {
		t.Fatalf("read: %d pending, oldest %s old; want 3 and 1s", pending, age)
	}
	if n := metrics.storeErrorsOf("orders backlog"); n != 0 {
		t.Fatalf("%d store errors before the outage", n)
	}
	store.down.Store(true)
	clock.Advance(time.Minute)
	n, _, _ := metrics.last()
	if pending, age := waitForReport(n + 1); pending != 3 || age != time.Minute+time.Second {
		t.Fatalf("unreadable for a minute: %d pending, oldest %s old; want 3 and 1m1s", pending, age)
	}
	if metrics.storeErrorsOf("orders backlog") == 0 {
		t.Fatal("the failed reads were not counted as store errors")
	}
}

// A subscription that starts while the database is down has read no
// backlog: it reports none, rather than "0 pending, 0 s old", which would
// overwrite a real measurement and silence the alert on the age.
func TestNoBacklogReportedBeforeARead(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC))
	store := &unreadableBacklog{oldest: clock.Now().Add(-time.Hour)}
	store.down.Store(true)
	metrics := observeBacklog(t, store, clock)
	for deadline := time.Now().Add(10 * time.Second); metrics.storeErrorsOf("orders backlog") < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the failed reads were not counted")
		}
	}
	if n, pending, age := metrics.last(); n > 0 {
		t.Fatalf("no backlog read, yet %d reports, the last %d pending, oldest %s old", n, pending, age)
	}
}
