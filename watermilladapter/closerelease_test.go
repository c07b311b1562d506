package watermilladapter

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// staleCopyStore hands out two ordered events, x and e, in one claim; once
// their leases ran out (phase 2), it hands e out again, under a new claim
// of the same owner. It records releases.
type staleCopyStore struct {
	instantStore
	clock *clocktest.Clock
	lease time.Duration

	mu       sync.Mutex
	claims   int
	phase2   bool
	reissued bool
	ids      []string
}

func (s *staleCopyStore) event(id, aggregate string) outbox.Event {
	e := outbox.Event{Envelope: outbox.NewJSON("OrderCreated", []byte(`{}`)), Status: outbox.StatusNew,
		LockedUntil: s.clock.Now().Add(s.lease)}
	e.ID, e.Topic, e.AggregateType, e.AggregateID = id, "orders", "order", aggregate
	return e
}

func (s *staleCopyStore) Claim(_ context.Context, _ outbox.ClaimRequest) ([]outbox.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims++
	switch {
	case s.claims == 1:
		return []outbox.Event{s.event("x", "A"), s.event("e", "B")}, nil
	case s.phase2 && !s.reissued:
		s.reissued = true
		return []outbox.Event{s.event("e", "B")}, nil
	}
	return nil, nil
}

func (s *staleCopyStore) Release(_ context.Context, _ string, ids []string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = append(s.ids, ids...)
	return int64(len(ids)), nil
}

func (s *staleCopyStore) releasedIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ids)
}

// receiveEvent receives the next message and checks that it carries the
// event want.
func receiveEvent(t *testing.T, msgs <-chan *message.Message, want string) {
	t.Helper()
	select {
	case msg := <-msgs:
		if got := msg.Metadata.Get(MetadataEventID); got != want {
			t.Fatalf("got event %s, want %s", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no message: want event %s", want)
	}
}

// Two ordered subscriptions of one topic in one Subscriber share its
// events and its owner. Subscription 1's handler of x hangs past the lease
// while e waits in its cold queue; subscription 2 claims e again once the
// lease ran out and hands it to its handler, which has not returned at
// Close. With Ordered, an event whose handler has not returned is left to
// its lease (SubscriberConfig.DrainTimeout): subscription 1's stale copy
// of e must not be released at Close, since the release, by owner, would
// end subscription 2's live claim, and another relay could deliver e
// again, and the next event of aggregate B overtake it, while e's handler
// still runs.
func TestCloseLeavesAStaleQueuedCopyToItsClaim(t *testing.T) {
	const lease = time.Hour
	store := &staleCopyStore{clock: clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), lease: lease}
	sub, err := NewSubscriber(store, SubscriberConfig{Ordered: true, WorkerCount: 1, BatchSize: 2, ColdQueueCapacity: 2,
		LockTimeout: lease, DrainTimeout: 100 * time.Millisecond, Clock: store.clock,
		PollInterval: time.Hour, BacklogInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	first, err := sub.Subscribe(t.Context(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	receiveEvent(t, first, "x")
	// x's handler hangs (never acks); e waits in subscription 1's queue.
	// The lease runs out; subscription 2 claims e again.
	store.clock.Advance(lease + time.Minute)
	store.mu.Lock()
	store.phase2 = true
	store.mu.Unlock()
	second, err := sub.Subscribe(t.Context(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	receiveEvent(t, second, "e")
	// Neither handler returns before Close.
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if released := store.releasedIDs(); slices.Contains(released, "e") {
		t.Fatalf("Close released ordered event e (released %v) while the handler of its live claim has not returned: the stale queued copy's release ends the live claim", released)
	}
}
