package watermilladapter_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// The hot path: events handed to this process's relay at their commit,
// and what it leaves to the claims.

func TestCommitDeliversOnHotPathRollbackDeliversNothing(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	got := newReceived()
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{PollInterval: time.Hour}, relaytest.Handlers{"orders": got.handler})

	rolledBack := newMsg(`{"order": 0}`)
	r.PublishRollback(t, "orders", rolledBack)
	committed := newMsg(`{"order":  1}`)
	committed.Metadata.Set("traceparent", "00-abc-01")
	committed.Metadata.Set(watermilladapter.MetadataAggregateID, "order-1")
	committed.Metadata.Set(watermilladapter.MetadataOccurredAt, "2026-01-02T03:04:05.123456789Z")
	r.Publish(t, "orders", committed)

	// The hot path is FIFO: had the rolled-back message gone anywhere, it
	// would arrive first.
	msg := got.next(t)
	require.Equal(t, committed.UUID, msg.UUID, "the handler sees the published UUID")
	require.Equal(t, []byte(`{"order":  1}`), []byte(msg.Payload), "payload byte for byte")
	require.Equal(t, "00-abc-01", msg.Metadata.Get("traceparent"))
	require.Equal(t, "order-1", msg.Metadata.Get(watermilladapter.MetadataAggregateID))
	require.Equal(t, "orders", msg.Metadata.Get(watermilladapter.MetadataEventType), "event type defaults to the topic")
	require.Equal(t, watermilladapter.SourceHot, msg.Metadata.Get(watermilladapter.MetadataSource))
	require.Equal(t, "1", msg.Metadata.Get(watermilladapter.MetadataAttempt))
	require.NotEmpty(t, msg.Metadata.Get(watermilladapter.MetadataEventID))
	require.Equal(t, "2026-01-02T03:04:05.123456Z", msg.Metadata.Get(watermilladapter.MetadataOccurredAt),
		"to the microsecond, as the row keeps it and a cold delivery would carry it")
	require.True(t, eventStatus(t, r.Store, msg).OccurredAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)))

	relaytest.Eventually(t, "DONE", func() bool { return eventStatus(t, r.Store, msg).Status == outbox.StatusDone })
	require.Equal(t, 1, rowCount(t, pool), "the rolled-back message left no row")
}

func TestFullHotQueueFallsBackToColdPath(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	release := make(chan struct{})
	got := newReceived()
	blockFirst := sync.Once{}
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{WorkerCount: 1, HotQueueCapacity: 1, PollInterval: time.Hour},
		relaytest.Handlers{"orders": func(msg *message.Message) error {
			blockFirst.Do(func() { <-release })
			return got.handler(msg)
		}})

	for i := range 5 {
		r.Publish(t, "orders", newMsg(fmt.Sprint(i)))
	}
	// One in the handler, one in the hot queue; the rest were released to
	// the cold path at commit, and the writes all succeeded.
	close(release)
	sources := map[string]int{}
	for range 5 {
		sources[got.next(t).Metadata.Get(watermilladapter.MetadataSource)]++
	}
	require.Positive(t, sources[watermilladapter.SourceCold], "overflow delivered by the cold path: %v", sources)
	advanceUntilDone(t, nil, pool, 5)
}

// A transaction that wrote hot-path events while the subscriber served
// their topic, and commits after Close returned, hands them back at once:
// they were written claimed by this relay, and would otherwise wait out
// the lease before another relay could take them.
func TestHotEventsCommittedAfterCloseAreReleased(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{})
	require.NoError(t, err)
	_, err = sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: sub})
	require.NoError(t, err)

	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		msg := newMsg("late")
		msg.SetContext(ctx)
		require.NoError(t, pub.Publish("orders", msg))
		var owner *string
		require.NoError(t, tx.QueryRow(ctx, `SELECT locked_by FROM outbox_event`).Scan(&owner))
		require.NotNil(t, owner, "written claimed by the relay, for the hot path")
		return sub.Close()
	}))

	var owner *string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT locked_by FROM outbox_event`).Scan(&owner))
	require.Nil(t, owner, "released when the commit found the relay closed")
}

// A hot event's claim begins when it is written, not when its transaction
// commits. A transaction that stays open past the claim commits an event
// any relay may claim at once: the hot path leaves it to them, instead of
// delivering it beside them.
func TestHotEventOfATransactionOpenPastItsClaimIsDeliveredOnce(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	store, err := postgres.NewStore(pool, postgres.Config{Clock: clock})
	require.NoError(t, err)
	const lease = 2 * time.Second
	var mu sync.Mutex
	deliveries := make(map[string][]string) // event id → sources
	var readers sync.WaitGroup
	subs := make([]*watermilladapter.Subscriber, 2)
	for i, poll := range []time.Duration{time.Hour, 50 * time.Millisecond} { // the writer's relay, another
		sub, msgs := subscribe(t, store, watermilladapter.SubscriberConfig{LockTimeout: lease, PollInterval: poll, Clock: clock}, "orders")
		subs[i] = sub
		readers.Go(func() {
			for msg := range msgs {
				mu.Lock()
				id := msg.Metadata.Get(watermilladapter.MetadataEventID)
				deliveries[id] = append(deliveries[id], msg.Metadata.Get(watermilladapter.MetadataSource))
				mu.Unlock()
				msg.Ack()
			}
		})
	}
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: subs[0]})
	require.NoError(t, err)

	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, _ pgx.Tx) error {
		msg := newMsg("long transaction")
		msg.SetContext(ctx)
		if err := pub.Publish("orders", msg); err != nil {
			return err
		}
		clock.Advance(lease + lease/4) // a slow call inside the transaction
		return nil
	}))
	advanceUntilDone(t, clock, pool, 1)
	for _, sub := range subs {
		require.NoError(t, sub.Close()) // closes its channel: every delivery reached its reader
	}
	readers.Wait()
	require.Len(t, deliveries, 1)
	for id, sources := range deliveries {
		require.Equal(t, []string{watermilladapter.SourceCold}, sources, "deliveries of %s", id)
	}
}

// An event whose topic no subscription of this process serves is neither
// delivered nor killed here: it waits for a relay that serves the topic.
func TestUnservedTopicWaitsForARelayThatServesIt(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	a := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, relaytest.Handlers{"payments": newReceived().handler})
	a.Publish(t, "shipments", newMsg("x"))
	id := onlyEventID(t, pool)
	relaytest.Eventually(t, "the hot-path claim released", func() bool { return statusOf(t, a.Store, id).LockedBy == "" })
	require.Equal(t, outbox.StatusNew, statusOf(t, a.Store, id).Status)

	got := newReceived()
	relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, relaytest.Handlers{"shipments": got.handler})
	require.Equal(t, id, got.next(t).Metadata.Get(watermilladapter.MetadataEventID))
	relaytest.Eventually(t, "DONE", func() bool { return statusOf(t, a.Store, id).Status == outbox.StatusDone })
}
