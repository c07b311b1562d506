package watermilladapter_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/syncbuf"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// The Publisher: what it writes, in which transaction, and through which
// pgx query modes.

// A delivered message published again (a handler passing it on, a
// PoisonQueue on an outbox Publisher) keeps its event id, as documented:
// on the same table that is a duplicate, and without the key it is a new
// event.
func TestDeliveredMessagePublishedAgainKeepsItsEventID(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	got := newReceived()
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, relaytest.Handlers{"orders": got.handler})
	r.Publish(t, "orders", newMsg(`{"order": 1}`))
	delivered := got.next(t)
	id := delivered.Metadata.Get(watermilladapter.MetadataEventID)

	again := delivered.Copy()
	err := r.Store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		return r.Pub.WithTx(tx).Publish("orders-poison", again)
	})
	require.ErrorIs(t, err, outbox.ErrDuplicateEvent)

	delete(again.Metadata, watermilladapter.MetadataEventID)
	r.Publish(t, "orders-poison", again)
	require.Equal(t, 2, rowCount(t, pool), "a new event beside %s", id)
}

// A message's idempotency key makes a publish retried by its caller write
// once: the retry is skipped without an error and is not delivered, and
// the delivered message carries the key. With RejectDuplicateKeys the
// retry fails, the transaction goes on.
func TestPublishWithAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	got := newReceived()
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, relaytest.Handlers{"orders": got.handler})
	keyed := func(payload string) *message.Message {
		msg := newMsg(payload)
		msg.Metadata.Set(watermilladapter.MetadataIdempotencyKey, "place-order-42")
		return msg
	}
	r.Publish(t, "orders", keyed("first"))
	delivered := got.next(t)
	require.Equal(t, "first", string(delivered.Payload))
	require.Equal(t, "place-order-42", delivered.Metadata.Get(watermilladapter.MetadataIdempotencyKey))
	_, isHeader := statusOf(t, r.Store, delivered.Metadata.Get(watermilladapter.MetadataEventID)).Headers[watermilladapter.MetadataIdempotencyKey]
	require.False(t, isHeader, "the key is a column, not a header")

	r.Publish(t, "orders", keyed("retried"), newMsg("another"))
	require.Equal(t, "another", string(got.next(t).Payload), "the retried message is skipped, not delivered")
	require.Equal(t, 2, rowCount(t, pool))

	strict, err := watermilladapter.NewPublisher(r.Store, watermilladapter.PublisherConfig{RejectDuplicateKeys: true})
	require.NoError(t, err)
	require.NoError(t, r.Store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		require.ErrorIs(t, strict.WithTx(tx).Publish("orders", newMsg("new"), keyed("retried")), outbox.ErrDuplicateKey)
		return strict.WithTx(tx).Publish("orders", newMsg("after"))
	}))
	require.Equal(t, 3, rowCount(t, pool), "nothing of the rejected publish, the later one committed")
}

func TestPublishWithoutTransactionFailsFast(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, nil)
	err := r.Pub.Publish("orders", newMsg("x"))
	require.ErrorIs(t, err, outbox.ErrNoTransaction)

	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	require.NoError(t, r.Pub.WithTx(tx).Publish("orders", newMsg("y")))
	require.NoError(t, tx.Commit(t.Context()))
	e := statusOf(t, r.Store, onlyEventID(t, pool))
	require.Equal(t, outbox.StatusNew, e.Status)
	require.Empty(t, e.LockedBy, "a caller-owned transaction has no hot path: nothing is pre-claimed")

	require.NoError(t, r.Pub.Close())
	require.NoError(t, r.Pub.Close())
	require.ErrorIs(t, r.Pub.Publish("orders", newMsg("z")), watermilladapter.ErrPublisherClosed)
	require.NoError(t, pool.Ping(t.Context()), "closing the publisher leaves the pool open")
}

// One Publish writes in one transaction. Messages whose contexts carry
// different transactions, or some one and some none, are refused: written
// in the first's, an event of a transaction that rolls back would be
// delivered.
func TestPublishRefusesMessagesOfDifferentTransactions(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, nil)
	other, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = other.Rollback(context.Background()) }()
	inOther := newMsg("other")
	inOther.SetContext(outbox.ContextWithTx[pgx.Tx](t.Context(), other))

	require.NoError(t, r.Store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		first, same := newMsg("first"), newMsg("same")
		first.SetContext(ctx)
		same.SetContext(outbox.ContextWithTx[pgx.Tx](t.Context(), tx))
		require.ErrorIs(t, r.Pub.Publish("orders", first, inOther), outbox.ErrInvalidRequest, "another transaction")
		require.ErrorIs(t, r.Pub.Publish("orders", first, newMsg("none")), outbox.ErrInvalidRequest, "no transaction")
		return r.Pub.Publish("orders", first, same)
	}))
	require.Equal(t, 2, rowCount(t, pool), "only the call whose messages share the transaction wrote")
}

type OrderPlaced struct {
	OrderID string `json:"order_id"`
}

// Watermill's CQRS EventBus publishes with the context it is given, so a
// long-lived bus writes through the outbox in the command's transaction.
func TestCQRSEventBusPublishesInTheTransaction(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	got := newReceived()
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, relaytest.Handlers{"events.OrderPlaced": got.handler})
	bus, err := cqrs.NewEventBusWithConfig(r.Pub, cqrs.EventBusConfig{
		GeneratePublishTopic: func(p cqrs.GenerateEventPublishTopicParams) (string, error) {
			return "events." + p.EventName, nil
		},
		Marshaler: cqrs.JSONMarshaler{GenerateName: cqrs.StructName},
	})
	require.NoError(t, err)

	err = r.Store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		return bus.Publish(ctx, &OrderPlaced{OrderID: "o-1"})
	})
	require.NoError(t, err)
	err = r.Store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		if err := bus.Publish(ctx, &OrderPlaced{OrderID: "o-2"}); err != nil {
			return err
		}
		return relaytest.ErrRollback
	})
	require.ErrorIs(t, err, relaytest.ErrRollback)
	require.ErrorIs(t, bus.Publish(t.Context(), &OrderPlaced{OrderID: "o-3"}), outbox.ErrNoTransaction)

	msg := got.next(t)
	require.JSONEq(t, `{"order_id":"o-1"}`, string(msg.Payload))
	require.Equal(t, watermilladapter.SourceHot, msg.Metadata.Get(watermilladapter.MetadataSource))
	require.Equal(t, 1, rowCount(t, pool))
}

// Behind PgBouncer a pool runs in pgx's exec or simple_protocol query
// mode, in which pgx encodes parameters without learning their types: the
// relay works end to end there too, writes of several events, the hot and
// cold paths, a retry, DONE outcomes, and notifications.
func TestRelayInThePgBouncerQueryModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			pool := testdb.NewInMode(t, mode)
			var logs syncbuf.Buffer
			notifier, err := postgres.NewNotifier(pool, postgres.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, notifier.Close()) })
			var failed atomic.Bool
			delivered := make(chan string, 4)
			r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{
				PollInterval: 50 * time.Millisecond, RetryPolicy: outbox.Backoff{Base: time.Millisecond, Max: time.Millisecond},
			}, relaytest.Handlers{"orders": func(msg *message.Message) error {
				if failed.CompareAndSwap(false, true) {
					return errors.New("first attempt fails")
				}
				delivered <- msg.Metadata.Get(watermilladapter.MetadataEventID)
				return nil
			}})
			r.Publish(t, "orders", newMsg("1"), newMsg("2"))
			notifier.Notify([]string{"orders"})
			ids := map[string]bool{}
			for range 2 {
				select {
				case id := <-delivered:
					ids[id] = true
				case <-time.After(relaytest.WaitLimit):
					t.Fatal("not every event was delivered")
				}
			}
			advanceUntilDone(t, nil, pool, 2)
			require.Len(t, ids, 2)
			require.NoError(t, notifier.Close())
			require.NotContains(t, logs.String(), "notify failed")
		})
	}
}
