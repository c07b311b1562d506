package watermilladapter

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// steppedClock is the wall clock plus an offset the test steps.
type steppedClock struct{ offset atomic.Int64 }

func (c *steppedClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// oneClaim's first claim returns one event, claimed by the clock's time.
type oneClaim struct {
	instantStore
	clock *steppedClock
	once  sync.Once
}

func (s *oneClaim) Claim(_ context.Context, req outbox.ClaimRequest) (events []outbox.Event, _ error) {
	s.once.Do(func() {
		e := outbox.Event{Envelope: outbox.NewJSON("OrderCreated", []byte(`{}`)), Status: outbox.StatusNew,
			LockedUntil: s.clock.Now().Add(req.LockTimeout)}
		e.ID, e.Topic = "event-1", "orders"
		events = []outbox.Event{e}
	})
	return events, nil
}

// The clock steps back while an event waits for the reader: the timer
// fires when half the claim is spent by its own reckoning, the clock says
// not yet, and the hand-over must wait for the rest only, not past the
// claim's end.
func TestHandOverGivesUpAfterAClockStepBack(t *testing.T) {
	t.Parallel()
	clock := &steppedClock{}
	_, msgs := subscribeOrders(t, &oneClaim{clock: clock}, SubscriberConfig{LockTimeout: time.Second, WorkerCount: 1,
		Clock: clock, PollInterval: time.Hour, BacklogInterval: time.Hour, DrainTimeout: 50 * time.Millisecond})
	time.Sleep(200 * time.Millisecond) // the worker waits to hand the event over
	clock.offset.Store(int64(-400 * time.Millisecond))
	time.Sleep(2800 * time.Millisecond) // by the clock, the claim ended 1.6 s ago
	select {
	case <-msgs:
		t.Fatal("an event was handed over after its claim ended")
	default:
	}
}

// sameEventEveryClaim's claims all return the same event, freshly
// claimed: as when this relay claims again an event whose handler still
// runs.
type sameEventEveryClaim struct {
	instantStore
	claims atomic.Int64
}

func (s *sameEventEveryClaim) Claim(_ context.Context, req outbox.ClaimRequest) ([]outbox.Event, error) {
	s.claims.Add(1)
	e := outbox.Event{Envelope: outbox.NewJSON("OrderCreated", []byte(`{}`)), Status: outbox.StatusNew,
		LockedUntil: time.Now().Add(req.LockTimeout)}
	e.ID, e.Topic = "event-1", "orders"
	return []outbox.Event{e}, nil
}

// While a handler holds an event, the relay does not hand it over again,
// however many of its claims return it: a second worker takes each copy
// and drops it. (After half the lease it does: see
// TestEventOfAHungHandlerIsDeliveredAgainAfterTheLease.)
func TestEventInAHandlerIsNotHandedOverAgain(t *testing.T) {
	t.Parallel()
	store := &sameEventEveryClaim{}
	_, msgs := subscribeOrders(t, store, SubscriberConfig{LockTimeout: time.Minute, WorkerCount: 2,
		PollInterval: 10 * time.Millisecond, BacklogInterval: time.Hour, DrainTimeout: 50 * time.Millisecond})
	var first *message.Message
	select {
	case first = <-msgs:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	for store.claims.Load() < 10 { // each claim queued a copy for the second worker
		time.Sleep(time.Millisecond)
	}
	select {
	case <-msgs:
		t.Fatal("the event was handed over again while its handler held it")
	case <-time.After(200 * time.Millisecond):
	}
	first.Ack()
}
