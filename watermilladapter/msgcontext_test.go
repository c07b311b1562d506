package watermilladapter

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// requireEnded fails the test unless msg's context ends, with
// context.Canceled.
func requireEnded(t *testing.T, what string, msg *message.Message) {
	t.Helper()
	select {
	case <-msg.Context().Done():
		require.ErrorIs(t, msg.Context().Err(), context.Canceled, what)
	case <-time.After(waitLimit):
		t.Fatalf("%s: the message context did not end", what)
	}
}

// Watermill's contract: a message's context ends when the message is
// acked or nacked, and when the subscriber gives up on it at Close.
func TestMessageContextEndsOnAckNackAndClose(t *testing.T) {
	t.Parallel()
	sub, driver, msgs := subscribeToEndlessBacklog(t, SubscriberConfig{BatchSize: 3, ColdQueueCapacity: 3, WorkerCount: 3,
		DrainTimeout: 50 * time.Millisecond})
	receiveLive := func() *message.Message {
		msg := receive(t, msgs, "a message")
		require.NoError(t, msg.Context().Err(), "message %s handed over with its context ended", msg.UUID)
		return msg
	}

	acked, nacked, held := receiveLive(), receiveLive(), receiveLive()
	acked.Ack()
	requireEnded(t, "ack", acked)
	nacked.Nack()
	requireEnded(t, "nack", nacked)

	require.NoError(t, held.Context().Err(), "a message in its handler had its context ended")
	require.NoError(t, closeOnClock(t, sub, driver.clock)) // gives up on held after DrainTimeout
	requireEnded(t, "close", held)
}

// stalledOutcomes is an endless backlog whose outcome statements hang
// until unblocked, as on a database that stopped answering for a while.
// It keeps how many outcomes the hanging statement records.
type stalledOutcomes struct {
	endlessBacklog
	unblock chan struct{}
	hanging atomic.Int64
}

func (d *stalledOutcomes) MarkDone(ctx context.Context, p outboxdriver.MarkDoneParams) (int64, error) {
	d.hanging.Store(int64(len(p.IDs)))
	select {
	case <-d.unblock:
		return 0, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// A message's context ends on Ack even when its outcome must wait for room
// in the settler's queue, as it does while the database does not answer.
func TestMessageContextEndsOnAckWhileOutcomesWait(t *testing.T) {
	t.Parallel()
	driver := &stalledOutcomes{endlessBacklog: endlessBacklog{clock: clocktest.New(testStart)}, unblock: make(chan struct{})}
	sub, err := NewSubscriber(fakeStore(t, driver, driver.clock), SubscriberConfig{BatchSize: 10, ColdQueueCapacity: 10,
		WorkerCount: 1, Clock: driver.clock, PollInterval: time.Hour, DrainTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() {
		close(driver.unblock)
		_ = closeOnClock(t, sub, driver.clock)
	})
	msgs, err := sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	// Half a queue of outcomes ends the linger: they go into a statement
	// that hangs. Once the queue behind it is full too, the outcome of
	// the next message waits for room, and the worker with it.
	waits := 0 // the number of the ack whose outcome waits, once known
	for acked := 1; waits == 0 || acked <= waits; acked++ {
		msg := receive(t, msgs, fmt.Sprintf("message %d, while the queue has room", acked))
		msg.Ack()
		requireEnded(t, fmt.Sprint("ack ", acked), msg)
		if hanging := int(driver.hanging.Load()); waits == 0 && hanging > 0 {
			waits = hanging + maxSettleBatch + 1
		}
		require.LessOrEqual(t, acked, 2*maxSettleBatch, "acked, and no statement hangs")
	}
	require.Len(t, sub.settler.updates, maxSettleBatch, "the last outcome found room")
}

// A handler that acks as Close gives up on it (DrainTimeout) has its Ack
// recorded, not its event released to be delivered again. A Nack then
// does not count: giving up ends the message's context, which handlers
// answer with a Nack, and a shutdown must not spend the event's attempt,
// nor make it DEAD; the event is released. Each case runs many times: a
// select between a ready answer and a closed abandon channel picks one at
// random.
func TestAnswerGivenAsHandlersAreAbandoned(t *testing.T) {
	t.Parallel()
	abandoned := make(chan struct{})
	close(abandoned)
	for range 100 {
		acked := message.NewMessage("1", nil)
		acked.Ack()
		ack, answered := answer(acked, abandoned)
		require.True(t, ack && answered, "acked message as handlers are abandoned: acked=%v answered=%v, want both", ack, answered)
		nacked := message.NewMessage("2", nil)
		nacked.Nack()
		ack, answered = answer(nacked, abandoned)
		require.False(t, ack || answered, "nacked message as handlers are abandoned: acked=%v answered=%v, want neither", ack, answered)
	}
	_, answered := answer(message.NewMessage("3", nil), abandoned)
	require.False(t, answered, "a message nobody answered counts as answered")
}

// A handler's own contexts, derived from the message's, end with it and
// cost no goroutine each: the message context passes the lookup of its
// cancellation on to the context it wraps.
func TestContextsDerivedFromAMessageContextEndWithItWithoutAGoroutineEach(t *testing.T) {
	t.Parallel()
	_, _, msgs := subscribeToEndlessBacklog(t, SubscriberConfig{BatchSize: 1, ColdQueueCapacity: 1, WorkerCount: 1})
	msg := receive(t, msgs, "a message")
	const derived = 200
	before := runtime.NumGoroutine()
	contexts := make([]context.Context, derived)
	for i := range contexts {
		ctx, cancel := context.WithTimeout(msg.Context(), time.Hour)
		t.Cleanup(cancel)
		contexts[i] = ctx
	}
	grew := runtime.NumGoroutine() - before
	require.Less(t, grew, derived/2, "%d derived contexts started %d goroutines", derived, grew)
	msg.Ack()
	for i, ctx := range contexts {
		select {
		case <-ctx.Done():
		case <-time.After(waitLimit):
			t.Fatalf("derived context %d did not end with the message's Ack", i)
		}
	}
}
