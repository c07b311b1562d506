package watermilladapter

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/logtest"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// steppedClock is a test clock whose time, the wall clock's, can step
// back while its timers, as the runtime's, count the time that passes.
type steppedClock struct {
	*clocktest.Clock // the time that passes: the timers
	offset           atomic.Int64
}

func (c *steppedClock) Now() time.Time { return c.Clock.Now().Add(time.Duration(c.offset.Load())) }

// oneClaim's first claim returns one event, claimed by the clock's time.
type oneClaim struct {
	instantDriver
	clock *steppedClock
	once  sync.Once
}

func (d *oneClaim) Claim(_ context.Context, p *outboxdriver.ClaimParams) (rows []outboxdriver.Row, _ error) {
	d.once.Do(func() { rows = []outboxdriver.Row{orderRow("event-1", p.LockedUntil)} })
	return rows, nil
}

// The clock steps back while an event waits for the reader: the timer
// fires when half the claim is spent by its own reckoning, the clock says
// not yet, and the hand-over must wait for the rest only, not past the
// claim's end.
func TestHandOverGivesUpAfterAClockStepBack(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	clock := &steppedClock{Clock: clocktest.New(testStart)}
	logger, captured := logtest.New()
	_, msgs := subscribeOrders(t, &oneClaim{clock: clock}, SubscriberConfig{LockTimeout: lease, WorkerCount: 1,
		Clock: clock, PollInterval: time.Hour, BacklogInterval: time.Hour, DrainTimeout: 50 * time.Millisecond, Logger: logger})
	waitForTimer(t, clock.Clock, lease/2) // the worker waits to hand the event over
	clock.offset.Store(int64(-400 * time.Millisecond))
	clock.Advance(lease / 2) // the timer fires; by the clock, 100 ms went by
	waitForTimer(t, clock.Clock, 400*time.Millisecond)
	clock.Advance(400 * time.Millisecond) // half the claim is gone by the clock too
	waitFor(t, "the event left to the next claim", func() bool {
		return len(captured.Find(slog.LevelWarn, dropReader)) == 1
	})
	select {
	case <-msgs:
		t.Fatal("an event was handed over after half its claim was spent")
	default:
	}
}

// sameEventEveryClaim's claims all return the same event, freshly
// claimed: as when this relay claims again an event whose handler still
// runs.
type sameEventEveryClaim struct {
	instantDriver
	claims atomic.Int64
}

func (d *sameEventEveryClaim) Claim(_ context.Context, p *outboxdriver.ClaimParams) ([]outboxdriver.Row, error) {
	d.claims.Add(1)
	return []outboxdriver.Row{orderRow("event-1", p.LockedUntil)}, nil
}

// While a handler holds an event, the relay does not hand it over again,
// however many of its claims return it: a second worker takes each copy
// and drops it. (After half the lease it does: see
// TestEventOfAHungHandlerIsDeliveredAgainAfterTheLease.)
func TestEventInAHandlerIsNotHandedOverAgain(t *testing.T) {
	t.Parallel()
	driver := &sameEventEveryClaim{}
	clock := clocktest.New(testStart)
	const poll = 10 * time.Millisecond
	sub, msgs := subscribeOrders(t, driver, SubscriberConfig{LockTimeout: time.Minute, WorkerCount: 2,
		Clock: clock, PollInterval: poll, BacklogInterval: time.Hour, DrainTimeout: 50 * time.Millisecond})
	first := receive(t, msgs, "the first delivery")
	cold := sub.subscriptions("orders")[0].cold
	// Each poll queues a copy; the second worker, the only one free, must
	// take it from the queue before the next: had it handed a copy over,
	// it would still wait for the reader, and the queue would fill up.
	for i := range 10 {
		claims := driver.claims.Load()
		waitForTimer(t, clock, poll)
		clock.Advance(poll)
		waitFor(t, fmt.Sprintf("copy %d taken by the second worker", i+1), func() bool {
			return driver.claims.Load() > claims && len(cold) == 0
		})
	}
	waitForTimer(t, clock, poll) // the last claim queued its copy
	waitFor(t, "the last copy taken", func() bool { return len(cold) == 0 })
	select {
	case <-msgs:
		t.Fatal("the event was handed over again while its handler held it")
	default:
	}
	first.Ack()
}

// subscriptions returns the subscriptions of topic.
func (s *Subscriber) subscriptions(topic string) []*subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.subs[topic]
}
