package watermilladapter_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// Close: what it waits for, what it gives up on, and what it hands back.

// Close does not wait for a cooldown to end.
func TestCloseDuringWakeCooldown(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(testStart)
	_, counted, sub, msgs := subscribeCounted(t, clock, time.Hour)
	sub.Wake("orders") // the clock stands still: the cooldown never ends

	require.NoError(t, closeWithin(t, sub, relaytest.WaitLimit, "Close waited for the cooldown"))
	_, open := <-msgs
	require.False(t, open)
	require.EqualValues(t, 1, counted.claims.Load(), "no claim was woken within the cooldown")
}

// Closing under load hands every unfinished claim back at once: another
// relay can take the rest without waiting for a lease, and nothing is lost.
func TestCloseUnderLoadReleasesEverything(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	writer := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, nil)
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	msgs := make([]*message.Message, 2000)
	for i := range msgs {
		msgs[i] = newMsg(fmt.Sprint(i))
	}
	require.NoError(t, writer.Pub.WithTx(tx).Publish("orders", msgs...))
	require.NoError(t, tx.Commit(t.Context()))

	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{Owner: "closing", BatchSize: 200})
	require.NoError(t, err)
	out, err := sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	acked := 0
	for msg := range out {
		msg.Ack()
		if acked++; acked == 300 {
			break
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	for msg := range out { // drain what was already on its way
		msg.Ack()
		acked++
	}
	require.NoError(t, <-closed)

	var held, done, pending int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT
		count(*) FILTER (WHERE locked_by = 'closing' AND status IN (0, 2)),
		count(*) FILTER (WHERE status = 1),
		count(*) FILTER (WHERE status = 0 AND available_at <= now() AND (locked_until IS NULL OR locked_until <= now()))
		FROM outbox_event`).Scan(&held, &done, &pending))
	require.Zero(t, held, "no claim left behind")
	require.Equal(t, acked, done, "every ack recorded before Close returned")
	require.Equal(t, len(msgs)-acked, pending, "the rest is due at once for any relay")

	got := newReceived()
	relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, relaytest.Handlers{"orders": got.handler})
	for range pending {
		got.next(t)
	}
}

// A Watermill router closes its subscribers in the background and returns
// from Close once their channels are closed; applications close the
// database right after. The channels must therefore close only once every
// outcome is recorded, or the last acks of every shutdown are lost and
// their events delivered again.
func TestRouterCloseReturnsOnceOutcomesAreRecorded(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	relayPool, err := pgxpool.New(t.Context(), pool.Config().ConnString())
	require.NoError(t, err)
	defer relayPool.Close()
	store, err := postgres.NewStore(relayPool, postgres.Config{})
	require.NoError(t, err)
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{})
	require.NoError(t, err)
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: sub})
	require.NoError(t, err)

	const events = 50
	handled := make(chan struct{}, events)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddConsumerHandler("orders", "orders", sub, func(*message.Message) error {
		handled <- struct{}{}
		return nil
	})
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(context.Background()) }()
	<-router.Running()
	for i := range events {
		require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			msg := newMsg(fmt.Sprint(i))
			msg.SetContext(ctx)
			return pub.Publish("orders", msg)
		}))
	}
	for range events {
		select {
		case <-handled:
		case <-time.After(relaytest.WaitLimit):
			t.Fatal("not every event handled in time")
		}
	}

	require.NoError(t, router.Close())
	require.NoError(t, <-runErr)
	relayPool.Close() // what an application does next

	var done, held int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT
		count(*) FILTER (WHERE status = 1), count(*) FILTER (WHERE locked_by IS NOT NULL)
		FROM outbox_event`).Scan(&done, &held))
	require.Equal(t, events, done, "every ack recorded before Router.Close returned")
	require.Zero(t, held, "no claim left behind")
}

// outcomesFail is a driver that claims but cannot record outcomes, as
// when the database goes away between the two.
type outcomesFail struct{ outboxdriver.Driver[pgx.Tx] }

func (outcomesFail) MarkDone(context.Context, outboxdriver.MarkDoneParams) (int64, error) {
	return 0, errors.New("database unreachable")
}

func (outcomesFail) RecordOutcomes(context.Context, outboxdriver.RecordOutcomesParams) (int64, error) {
	return 0, errors.New("database unreachable")
}

// Close waits for the outcomes to be recorded, but not forever: with the
// database down it gives up after a bounded time, leaving the events to
// their leases, and says so.
func TestCloseEndsWhileOutcomesCannotBeRecorded(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(testStart)
	store := storeWithBacklog(t, testdb.New(t), clock, 1)
	sub, err := watermilladapter.NewSubscriber(storeOn(t, outcomesFail{store.Driver()}, clock), watermilladapter.SubscriberConfig{Clock: clock})
	require.NoError(t, err)
	out, err := sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	msg := nextMessage(t, out, "the event was not delivered")
	id := msg.Metadata.Get(watermilladapter.MetadataEventID)
	msg.Ack()

	closing := clock.Now()
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	relaytest.AdvanceUntil(t, clock, 250*time.Millisecond, "Close to give up on the outcome the database cannot take", func() bool {
		select {
		case err = <-closed:
			return true
		default:
			return false
		}
	})
	require.ErrorIs(t, err, watermilladapter.ErrNotRecorded)
	require.ErrorContains(t, err, ": 1 outcomes and releases")
	require.Less(t, clock.Now().Sub(closing), 20*time.Second, "Close gave up about 10 s after it began")
	e, err := store.Get(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, outbox.StatusNew, e.Status, "the outcome was not recorded: the lease brings the event back")
}

// Close gives up on handlers after DrainTimeout by ending their messages'
// contexts, and handlers that honour them fail and Nack. Those events are
// released as they were, their attempts unspent: on its last attempt, an
// event would otherwise go DEAD for a shutdown.
func TestNacksOfAbandonedHandlersSpendNoAttempt(t *testing.T) {
	t.Parallel()
	const events, drain = 16, 70 * time.Millisecond
	clock := clocktest.New(testStart)
	store := storeWithBacklog(t, testdb.New(t), clock, events)
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		WorkerCount: events, DrainTimeout: drain, Clock: clock,
		RetryPolicy: outbox.Backoff{Base: time.Second, Max: time.Second, MaxAttempts: 1}})
	require.NoError(t, err)
	msgs, err := sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	var delivered []*message.Message
	for range events {
		msg := nextMessage(t, msgs, "not every event was delivered")
		go func() {
			<-msg.Context().Done() // a publish that honours its context
			msg.Nack()
		}()
		delivered = append(delivered, msg)
	}
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	relaytest.WaitForTimer(t, clock, drain)
	clock.Advance(drain) // Close gives up on the handlers
	require.NoError(t, <-closed)
	for _, msg := range delivered {
		e := eventStatus(t, store, msg)
		require.Equal(t, outbox.StatusNew, e.Status, "event %s", e.ID)
		require.Zero(t, e.Attempts, "event %s", e.ID)
	}
}

// hangingBacklog is a driver whose backlog query hangs until its context
// ends, as on a database that stopped answering; it says when one hangs.
type hangingBacklog struct {
	outboxdriver.Driver[pgx.Tx]
	hanging chan struct{}
}

func (d hangingBacklog) Backlog(ctx context.Context, _ string) (int64, time.Time, error) {
	select {
	case d.hanging <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return 0, time.Time{}, ctx.Err()
}

// Close cancels the backlog query of the metrics, a read, instead of
// waiting for its timeout, which on this test's clock never comes.
func TestCloseDoesNotWaitForTheBacklogQuery(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(testStart)
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{Clock: clock})
	require.NoError(t, err)
	driver := hangingBacklog{Driver: store.Driver(), hanging: make(chan struct{}, 1)}
	sub, err := watermilladapter.NewSubscriber(storeOn(t, driver, clock), watermilladapter.SubscriberConfig{
		Metrics: &recordingMetrics{}, Clock: clock})
	require.NoError(t, err)
	_, err = sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	select {
	case <-driver.hanging:
	case <-time.After(relaytest.WaitLimit):
		t.Fatal("the backlog was not read")
	}
	require.NoError(t, closeWithin(t, sub, relaytest.WaitLimit, "Close waited for the backlog query"))
}
