package watermilladapter

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// Watermill's contract: a message's context ends when the message is
// acked or nacked, and when the subscriber gives up on it at Close.
func TestMessageContextEndsOnAckNackAndClose(t *testing.T) {
	sub, _, msgs := subscribeToEndlessBacklog(t, SubscriberConfig{BatchSize: 3, ColdQueueCapacity: 3, WorkerCount: 3,
		DrainTimeout: 50 * time.Millisecond})
	receive := func() *message.Message {
		select {
		case msg := <-msgs:
			if err := msg.Context().Err(); err != nil {
				t.Fatalf("message %s handed over with its context ended: %v", msg.UUID, err)
			}
			return msg
		case <-time.After(10 * time.Second):
			t.Fatal("no message")
			return nil
		}
	}
	ended := func(what string, msg *message.Message) {
		t.Helper()
		select {
		case <-msg.Context().Done():
			if msg.Context().Err() != context.Canceled {
				t.Fatalf("%s: context error %v, want context.Canceled", what, msg.Context().Err())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the message context did not end", what)
		}
	}

	acked, nacked, held := receive(), receive(), receive()
	acked.Ack()
	ended("ack", acked)
	nacked.Nack()
	ended("nack", nacked)

	if err := held.Context().Err(); err != nil {
		t.Fatalf("a message in its handler had its context ended: %v", err)
	}
	if err := sub.Close(); err != nil { // gives up on held after DrainTimeout
		t.Fatal(err)
	}
	ended("close", held)
}

// stalledOutcomes is an endless backlog whose outcome statements hang
// until unblocked, as on a database that stopped answering for a while.
type stalledOutcomes struct {
	endlessBacklog
	unblock chan struct{}
}

func (s *stalledOutcomes) UpdateStatus(ctx context.Context, _ string, _ ...outbox.StatusUpdate) (int64, error) {
	select {
	case <-s.unblock:
		return 0, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// A message's context ends on Ack even when its outcome must wait for room
// in the settler's queue, as it does while the database does not answer.
func TestMessageContextEndsOnAckWhileOutcomesWait(t *testing.T) {
	store := &stalledOutcomes{unblock: make(chan struct{})}
	store.clock = clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	sub, err := NewSubscriber(store, SubscriberConfig{BatchSize: 10, ColdQueueCapacity: 10, WorkerCount: 1,
		Clock: store.clock, PollInterval: time.Hour, DrainTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(store.unblock)
		_ = sub.Close()
	})
	msgs, err := sub.Subscribe(t.Context(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	// Ack until the worker waits for room for an outcome: one batch is in
	// the hanging statement and a full queue behind it.
	for i := 0; ; i++ {
		var msg *message.Message
		select {
		case msg = <-msgs:
		case <-time.After(time.Second):
			if i <= maxSettleBatch {
				t.Fatalf("message %d not delivered", i)
			}
			return // the last outcome waits, and its message's context has ended
		}
		msg.Ack()
		select {
		case <-msg.Context().Done():
		case <-time.After(2 * time.Second):
			t.Fatalf("the context of acked message %d did not end while its outcome waited", i)
		}
	}
}

// A handler that acks as Close gives up on it (DrainTimeout) has its Ack
// recorded, not its event released to be delivered again. A Nack then
// does not count: giving up ends the message's context, which handlers
// answer with a Nack, and a shutdown must not spend the event's attempt,
// nor make it DEAD; the event is released. Each case runs many times: a
// select between a ready answer and a closed abandon channel picks one at
// random.
func TestAnswerGivenAsHandlersAreAbandoned(t *testing.T) {
	abandoned := make(chan struct{})
	close(abandoned)
	for range 100 {
		acked := message.NewMessage("1", nil)
		acked.Ack()
		if ack, answered := answer(acked, abandoned); !ack || !answered {
			t.Fatalf("acked message as handlers are abandoned: acked=%v answered=%v, want both", ack, answered)
		}
		nacked := message.NewMessage("2", nil)
		nacked.Nack()
		if ack, answered := answer(nacked, abandoned); ack || answered {
			t.Fatalf("nacked message as handlers are abandoned: acked=%v answered=%v, want neither", ack, answered)
		}
	}
	if _, answered := answer(message.NewMessage("3", nil), abandoned); answered {
		t.Fatal("a message nobody answered counts as answered")
	}
}

// A handler's own contexts, derived from the message's, end with it and
// cost no goroutine each: the message context passes the lookup of its
// cancellation on to the context it wraps.
func TestContextsDerivedFromAMessageContextEndWithItWithoutAGoroutineEach(t *testing.T) {
	_, _, msgs := subscribeToEndlessBacklog(t, SubscriberConfig{BatchSize: 1, ColdQueueCapacity: 1, WorkerCount: 1})
	var msg *message.Message
	select {
	case msg = <-msgs:
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
	}
	const derived = 200
	before := runtime.NumGoroutine()
	contexts := make([]context.Context, derived)
	for i := range contexts {
		ctx, cancel := context.WithTimeout(msg.Context(), time.Hour)
		t.Cleanup(cancel)
		contexts[i] = ctx
	}
	if grew := runtime.NumGoroutine() - before; grew >= derived/2 {
		t.Fatalf("%d derived contexts started %d goroutines", derived, grew)
	}
	msg.Ack()
	for i, ctx := range contexts {
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("derived context %d did not end with the message's Ack", i)
		}
	}
}
