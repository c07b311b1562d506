package watermilladapter

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// endlessBacklog is an outbox.Store whose claims always come back full, as
// a backlog larger than any drain does; it records, for each claim,
// whether the claim came with its cursor at the start.
type endlessBacklog struct {
	instantStore
	clock *clocktest.Clock

	mu        sync.Mutex
	next      int
	fromStart []bool
}

func (s *endlessBacklog) Claim(_ context.Context, req outbox.ClaimRequest) ([]outbox.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fromStart = append(s.fromStart, req.Cursor.IsZero())
	events := make([]outbox.Event, req.Limit)
	for i := range events {
		s.next++
		events[i] = outbox.Event{Envelope: outbox.NewJSON("OrderCreated", []byte(`{}`)), Status: outbox.StatusNew}
		events[i].ID, events[i].Topic = fmt.Sprint("event-", s.next), "orders"
	}
	*req.Cursor = outbox.ClaimCursor{DueAt: s.clock.Now(), ID: events[len(events)-1].ID}
	return events, nil
}

// subscribeToEndlessBacklog subscribes to "orders" with a subscriber of
// cfg on an endless backlog, on a test clock, with polling left to the
// claims; the subscriber is closed at cleanup.
func subscribeToEndlessBacklog(t *testing.T, cfg SubscriberConfig) (*Subscriber, *endlessBacklog, <-chan *message.Message) {
	t.Helper()
	store := &endlessBacklog{clock: clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
	cfg.Clock, cfg.PollInterval, cfg.BacklogInterval = store.clock, time.Hour, time.Hour
	sub, msgs := subscribeOrders(t, store, cfg)
	return sub, store, msgs
}

// subscribeOrders subscribes to "orders" with a subscriber of cfg on
// store; the subscriber is closed at cleanup.
func subscribeOrders(t *testing.T, store outbox.Store, cfg SubscriberConfig) (*Subscriber, <-chan *message.Message) {
	t.Helper()
	sub, err := NewSubscriber(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	msgs, err := sub.Subscribe(t.Context(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	return sub, msgs
}

func (s *endlessBacklog) claims() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]bool(nil), s.fromStart...)
}

// Under a backlog that never ends, claims follow their cursor, and start
// from the earliest due event again once claimRescan has passed: events
// that became due behind the cursor are not left there for good.
func TestClaimsStartAgainFromTheEarliestDueEventEverySecond(t *testing.T) {
	_, store, msgs := subscribeToEndlessBacklog(t, SubscriberConfig{BatchSize: 10, ColdQueueCapacity: 20, WorkerCount: 1})
	clock := store.clock
	// ackUntil acks messages until the store has seen n claims.
	ackUntil := func(n int) []bool {
		deadline := time.After(10 * time.Second)
		for {
			if claims := store.claims(); len(claims) >= n {
				return claims
			}
			select {
			case msg := <-msgs:
				msg.Ack()
			case <-deadline:
				t.Fatalf("%d claims, want %d", len(store.claims()), n)
			}
		}
	}

	claims := ackUntil(5)
	if !claims[0] {
		t.Fatal("the first claim starts from the earliest due event")
	}
	for i, fromStart := range claims[1:5] {
		if fromStart {
			t.Fatalf("claim %d started from the earliest due event within the first second: %v", i+2, claims)
		}
	}
	clock.Advance(claimRescan)
	before := len(store.claims())
	claims = ackUntil(before + 3)
	for _, fromStart := range claims[before:] {
		if fromStart {
			return
		}
	}
	t.Fatalf("no claim started from the earliest due event after %s of backlog: %v", claimRescan, claims)
}
