package watermilladapter_test

import (
	"context"
	"fmt"
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

// The cold path: claims through a backlog, wake-ups and their cooldown,
// events due later.

// Claims follow a cursor through a backlog. An event written before the
// backlog by a transaction that commits after the cursor has passed it
// lies behind the cursor, and must still be delivered.
func TestEventCommittedBehindTheClaimCursorIsDelivered(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	got := newReceived()
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{BatchSize: 10, PollInterval: 50 * time.Millisecond},
		relaytest.Handlers{"orders": got.handler})
	writer, err := outbox.NewWriter(r.Store, outbox.WriterConfig{}) // no hot path: the cold path claims
	require.NoError(t, err)
	event := func(i int) outbox.Envelope {
		e := outbox.NewJSON("OrderCreated", fmt.Appendf(nil, `{"n": %d}`, i))
		e.Topic = "orders"
		return e
	}

	late, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = late.Rollback(context.Background()) }()
	lateIDs, err := writer.Write(t.Context(), late, event(-1))
	require.NoError(t, err)

	backlog := make([]outbox.Envelope, 100)
	for i := range backlog {
		backlog[i] = event(i)
	}
	require.NoError(t, r.Store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, backlog...)
		return err
	}))
	for range backlog {
		got.next(t)
	}
	require.NoError(t, late.Commit(t.Context()))
	msg := got.next(t)
	require.Equal(t, lateIDs[0], msg.Metadata.Get(watermilladapter.MetadataEventID))
}

// An event behind the claim cursor, here one written before a backlog and
// committed after the cursor passed it, is claimed when its wake-up comes,
// not at the next poll: a short claim after the cursor is followed at once
// by one from the earliest due event.
func TestWokenClaimFindsWhatTheCursorPassed(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	store, err := postgres.NewStore(pool, postgres.Config{Clock: clock})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{}) // another process: no hot path
	require.NoError(t, err)
	late, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = late.Rollback(context.Background()) }()
	_, err = writer.Write(t.Context(), late, orderEvent("late"))
	require.NoError(t, err)
	clock.Advance(time.Millisecond) // the backlog is due after "late"
	writeCold(t, store, orderEvent("b0"), orderEvent("b1"), orderEvent("b2"))

	sub, msgs := subscribe(t, store, watermilladapter.SubscriberConfig{
		BatchSize: 2, ColdQueueCapacity: 2, WorkerCount: 1, PollInterval: time.Hour, Clock: clock}, "orders")
	first := nextMessage(t, msgs, "b0") // a full claim of b0 and b1: the cursor is at b1
	require.Equal(t, "b0", string(first.Payload))
	require.NoError(t, late.Commit(t.Context()))
	sub.Wake("orders")
	first.Ack()

	var rest []string
	for len(rest) < 3 {
		msg := nextMessageOnClock(t, clock, watermilladapter.DefaultWakeCooldown, msgs,
			"woken, but the event the cursor passed waits for the poll")
		rest = append(rest, string(msg.Payload))
		msg.Ack()
	}
	require.ElementsMatch(t, []string{"b1", "b2", "late"}, rest)
}

// With SkipRecent, the claim a wake-up brings leaves the commit it
// announced for later; a claim comes when that commit is old enough, not
// at the next poll.
func TestWokenCommitTooRecentIsClaimedOnceOldEnough(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(testStart)
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{Clock: clock})
	require.NoError(t, err)
	const skipRecent = 300 * time.Millisecond
	sub, msgs := subscribe(t, store, watermilladapter.SubscriberConfig{
		SkipRecent: skipRecent, PollInterval: time.Hour, Clock: clock}, "orders")
	ids := writeCold(t, store, orderEvent("announced")) // by another process
	sub.Wake("orders")                                  // as its notification would
	got := nextMessageOnClock(t, clock, skipRecent/10, msgs, "the announced event waits for the poll")
	require.Equal(t, ids[0], got.Metadata.Get(watermilladapter.MetadataEventID))
	require.False(t, clock.Now().Before(testStart.Add(skipRecent)), "claimed before it was old enough")
	got.Ack()
}

// subscribeCounted subscribes to "orders", on clock, with a subscriber
// whose claims are counted, once its first claim is made; the poll
// interval is an hour.
func subscribeCounted(t *testing.T, clock *clocktest.Clock, wakeCooldown time.Duration) (*postgres.Store, *claimCounter, *watermilladapter.Subscriber, <-chan *message.Message) {
	t.Helper()
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{Clock: clock})
	require.NoError(t, err)
	counted := &claimCounter{Driver: store.Driver()}
	sub, msgs := subscribe(t, storeOn(t, counted, clock), watermilladapter.SubscriberConfig{
		PollInterval: time.Hour, WakeCooldown: wakeCooldown, Clock: clock}, "orders")
	relaytest.Eventually(t, "the first claim", func() bool { return counted.ended.Load() == 1 })
	return store, counted, sub, msgs
}

// Wake-ups within WakeCooldown of a claim make one claim at its end, which
// delivers what they announced: a stream of notifications costs a claim
// per cooldown, not one each.
func TestWakeUpsWithinCooldownMakeOneClaim(t *testing.T) {
	t.Parallel()
	const cooldown = 3 * time.Second // as long as no other wait of the relay
	clock := clocktest.New(testStart)
	store, counted, sub, msgs := subscribeCounted(t, clock, cooldown)
	writeCold(t, store, orderEvent("announced"))
	for range 20 {
		sub.Wake("orders")
	}
	relaytest.WaitForTimer(t, clock, cooldown) // the wake-ups wait for the cooldown's end
	require.EqualValues(t, 1, counted.claims.Load(), "claims within the cooldown")
	clock.Advance(cooldown)
	got := nextMessage(t, msgs, "the woken claim delivered nothing")
	require.Equal(t, "announced", string(got.Payload))
	got.Ack()
	relaytest.WaitForTimer(t, clock, time.Hour) // back to the poll: no wake-up is left
	require.EqualValues(t, 2, counted.claims.Load(), "the first claim, then one for all the wake-ups")
}

func TestDelayedDeliverySkipsHotPath(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	got := newReceived()
	clock := clocktest.New(testStart)
	r := relaytest.StartOnClock(t, pool, clock, watermilladapter.SubscriberConfig{PollInterval: time.Hour},
		relaytest.Handlers{"orders": got.handler})
	delivered := publishForLater(t, r, clock, got, newMsg("later"))
	require.Equal(t, watermilladapter.SourceCold, delivered.Metadata.Get(watermilladapter.MetadataSource))

	past := newMsg("due an hour ago")
	past.Metadata.Set(watermilladapter.MetadataDeliverAfter, clock.Now().Add(-time.Hour).Format(time.RFC3339Nano))
	r.Publish(t, "orders", past)
	delivered = got.next(t)
	require.Equal(t, "due an hour ago", string(delivered.Payload))
	require.Equal(t, watermilladapter.SourceHot, delivered.Metadata.Get(watermilladapter.MetadataSource), "a past time is at once")

	bad := newMsg("x")
	bad.Metadata.Set(watermilladapter.MetadataDeliverAfter, "tomorrow")
	err := r.Store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		bad.SetContext(ctx)
		return r.Pub.Publish("orders", bad)
	})
	require.ErrorIs(t, err, outbox.ErrInvalidEnvelope)
	require.ErrorContains(t, err, bad.UUID)
	require.ErrorContains(t, err, `want an RFC 3339 time in years 1 to 9999 (2026-11-27T09:30:00Z), got "tomorrow"`)

	// outbox_deliver_in: due that long after the write, by the store's
	// clock, and claimed then.
	in5s := newMsg("in 5 s")
	in5s.Metadata.Set(watermilladapter.MetadataDeliverIn, "5s")
	id := outbox.NewID()
	in5s.Metadata.Set(watermilladapter.MetadataEventID, id)
	due := clock.Now().Add(5 * time.Second)
	r.Publish(t, "orders", in5s)
	require.True(t, due.Equal(statusOf(t, r.Store, id).AvailableAt), "due at %v", due)
	delivered = nextMessageOnClock(t, clock, 100*time.Millisecond, got.ch, "the event for later")
	require.Equal(t, "in 5 s", string(delivered.Payload))
	require.False(t, clock.Now().Before(due), "delivered before its time")
	require.Less(t, clock.Now().Sub(due), 30*time.Minute, "delivered at the poll, not when due")
	require.Empty(t, delivered.Metadata.Get(watermilladapter.MetadataDeliverIn), "a delay is not passed on")
}

// An event this process writes for later is claimed when it comes due, not
// at the next poll, which here is an hour away; an ordered relay names its
// aggregate.
func TestDelayedEventIsClaimedWhenDueNotAtThePoll(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			t.Parallel()
			pool := testdb.New(t)
			got := newReceived()
			clock := clocktest.New(testStart)
			r := relaytest.StartOnClock(t, pool, clock, watermilladapter.SubscriberConfig{PollInterval: time.Hour, Ordered: ordered},
				relaytest.Handlers{"orders": got.handler})
			msg := newMsg("later")
			msg.Metadata.Set(watermilladapter.MetadataAggregateID, "order-1")
			delivered := publishForLater(t, r, clock, got, msg)
			require.Equal(t, "later", string(delivered.Payload))
		})
	}
}

// publishForLater publishes msg on "orders" for 5 s later, moves the
// clock on until it is delivered, and returns it: delivered once due, and
// long before the poll, an hour away.
func publishForLater(t *testing.T, r *relaytest.Relay, clock *clocktest.Clock, got *received, msg *message.Message) *message.Message {
	t.Helper()
	due := clock.Now().Add(5 * time.Second)
	msg.Metadata.Set(watermilladapter.MetadataDeliverAfter, due.Format(time.RFC3339Nano))
	r.Publish(t, "orders", msg)
	delivered := nextMessageOnClock(t, clock, 100*time.Millisecond, got.ch, "the event for later")
	require.False(t, clock.Now().Before(due), "delivered before its time")
	require.Less(t, clock.Now().Sub(due), 30*time.Minute, "delivered at the poll, not when due")
	return delivered
}
