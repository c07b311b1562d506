package watermilladapter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// What a handler's answer makes of its event: DONE, RETRY, DEAD, a
// deferral, and DEAD events replayed.

func TestAlwaysFailingHandlerRetriesThenDead(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	var calls sync.Map
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{
		RetryPolicy: outbox.Backoff{Base: 5 * time.Millisecond, MaxAttempts: 3, NoJitter: true},
	}, relaytest.Handlers{"orders": func(msg *message.Message) error {
		calls.Store(msg.Metadata.Get(watermilladapter.MetadataAttempt), true)
		return errors.New("downstream refused: 503")
	}})
	r.Publish(t, "orders", newMsg("x"))
	id := onlyEventID(t, pool)
	relaytest.Eventually(t, "DEAD", func() bool { return statusOf(t, r.Store, id).Status == outbox.StatusDead })
	e := statusOf(t, r.Store, id)
	require.Equal(t, 3, e.Attempts)
	require.Equal(t, "downstream refused: 503", e.LastError)
	for _, attempt := range []string{"1", "2", "3"} {
		_, ok := calls.Load(attempt)
		require.True(t, ok, "attempt %s delivered", attempt)
	}
}

func TestPermanentErrorIsDeadAtOnce(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, relaytest.Handlers{"orders": func(*message.Message) error {
		return outbox.Permanent(errors.New("schema violation"))
	}})
	r.Publish(t, "orders", newMsg("x"))
	id := onlyEventID(t, pool)
	relaytest.Eventually(t, "DEAD", func() bool { return statusOf(t, r.Store, id).Status == outbox.StatusDead })
	e := statusOf(t, r.Store, id)
	require.Equal(t, 1, e.Attempts)
	require.Contains(t, e.LastError, "schema violation")
}

func TestInterceptorOrder(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	var (
		mu    sync.Mutex
		trace []string
	)
	note := func(s string) {
		mu.Lock()
		trace = append(trace, s)
		mu.Unlock()
	}
	var rejected atomic.Bool
	interceptors := outboxmw.Intercept(nil,
		outboxmw.Interceptor{
			Before: func(*message.Message) error { note("before 1"); return nil },
			After:  func(_ *message.Message, err error) { note(fmt.Sprint("after 1: ", err)) },
		},
		outboxmw.Interceptor{
			Before: func(*message.Message) error {
				note("before 2")
				if rejected.CompareAndSwap(false, true) {
					return errors.New("tenant suspended")
				}
				return nil
			},
			After: func(*message.Message, error) { note("after 2"); panic("an after hook panics") },
		},
	)
	done := make(chan struct{}, 2)
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{
		WorkerCount: 1,
		RetryPolicy: outbox.Backoff{Base: time.Millisecond, NoJitter: true},
	}, relaytest.Handlers{"orders": func(*message.Message) error { note("handler"); done <- struct{}{}; return nil }}, interceptors)
	r.Publish(t, "orders", newMsg("x"))
	select {
	case <-done:
	case <-time.After(relaytest.WaitLimit):
		t.Fatal("not delivered")
	}
	id := onlyEventID(t, pool)
	relaytest.Eventually(t, "DONE", func() bool { return statusOf(t, r.Store, id).Status == outbox.StatusDone })
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{
		"before 1", "before 2", "after 2", "after 1: interceptor before dispatch: tenant suspended",
		"before 1", "before 2", "handler", "after 2", "after 1: <nil>",
	}, trace)
	require.Equal(t, 1, statusOf(t, r.Store, id).Attempts, "a failing before hook fails the delivery")
}

func TestDeadReplayRedelivers(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	got := newReceived()
	var broken atomic.Bool
	broken.Store(true)
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, relaytest.Handlers{
		"orders": deadWhile(func(*message.Message) bool { return broken.Load() }, got)})
	r.Publish(t, "orders", newMsg("x"))
	id := onlyEventID(t, pool)
	relaytest.Eventually(t, "DEAD", func() bool { return statusOf(t, r.Store, id).Status == outbox.StatusDead })
	broken.Store(false)
	n, err := r.Store.ReplayDead(t.Context(), outbox.DeadFilter{IDs: []string{id}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	msg := got.next(t)
	require.Equal(t, id, msg.Metadata.Get(watermilladapter.MetadataEventID))
	relaytest.Eventually(t, "DONE", func() bool { return statusOf(t, r.Store, id).Status == outbox.StatusDone })
}

// A relay on a store that deletes delivered events leaves in the table
// only what was not delivered: the DEAD event, which replays like any
// other and is deleted once it is delivered.
func TestDeleteDoneLeavesOnlyUndeliveredEvents(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	got := newReceived()
	var broken atomic.Bool
	broken.Store(true)
	r := relaytest.StartStore(t, pool, postgres.Config{DeleteDone: true}, watermilladapter.SubscriberConfig{},
		relaytest.Handlers{"orders": deadWhile(func(msg *message.Message) bool {
			return string(msg.Payload) == "poison" && broken.Load()
		}, got)})
	r.Publish(t, "orders", newMsg("a"), newMsg("poison"), newMsg("b"))
	writer, err := outbox.NewWriter(r.Store, outbox.WriterConfig{}) // no hot path: the cold path claims
	require.NoError(t, err)
	require.NoError(t, r.Store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		e := outbox.NewJSON("OrderCreated", []byte(`{"cold": true}`))
		e.Topic = "orders"
		_, err := writer.Write(ctx, tx, e)
		return err
	}))
	for range 3 {
		got.next(t)
	}
	relaytest.Eventually(t, "delivered events deleted", func() bool { return rowCount(t, pool) == 1 })
	id := onlyEventID(t, pool)
	e := statusOf(t, r.Store, id)
	require.Equal(t, outbox.StatusDead, e.Status)
	require.Contains(t, e.LastError, "bug in consumer")

	broken.Store(false)
	n, err := r.Store.ReplayDead(t.Context(), outbox.DeadFilter{IDs: []string{id}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, id, got.next(t).Metadata.Get(watermilladapter.MetadataEventID))
	relaytest.Eventually(t, "the replayed event deleted once delivered", func() bool { return rowCount(t, pool) == 0 })
}
