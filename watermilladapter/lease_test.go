package watermilladapter_test

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/logtest"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// Claims are leases: a relay that dies leaves its events to the others
// when its leases end, a handler that outlives its lease sees the event
// delivered again, and an event is handed to a handler only while half its
// lease is left. The tests move a clocktest.Clock through the leases.

// A relay that dies holding claims cannot release them; after the lease
// another relay delivers the events.
func TestCrashedRelaysClaimsAreRecoveredAfterLease(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	store := storeWithBacklog(t, pool, clock, 20)
	const lease = 5 * time.Second
	crashedAt := clock.Now()
	claimed, err := store.Driver().Claim(t.Context(), &outboxdriver.ClaimParams{Owner: "crashed-relay", Topic: "orders",
		Now: crashedAt, CreatedBefore: crashedAt, LockedUntil: crashedAt.Add(lease), Limit: 50})
	require.NoError(t, err)
	require.Len(t, claimed, 20)

	got := newReceived()
	relaytest.StartOnClock(t, pool, clock, watermilladapter.SubscriberConfig{}, relaytest.Handlers{"orders": got.handler})
	seen := map[string]bool{}
	msg := nextMessageOnClock(t, clock, 100*time.Millisecond, got.ch, "the crashed relay's events, after the lease")
	require.False(t, clock.Now().Before(crashedAt.Add(lease)), "claimed before the lease ended")
	seen[msg.Metadata.Get(watermilladapter.MetadataEventID)] = true
	for range 19 {
		seen[got.next(t).Metadata.Get(watermilladapter.MetadataEventID)] = true
	}
	require.Len(t, seen, 20)
}

// A handler that outlives its lease: another relay claims the event and
// delivers it again. The first relay's late Nack must then change nothing:
// not the second relay's lease, which would let a third take the event
// while the second still works on it, nor the attempts.
func TestOutcomeAfterTheLeaseLeavesTheNewClaimAlone(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	store := storeWithBacklog(t, pool, clock, 1)
	const lease, poll = 2 * time.Second, 50 * time.Millisecond
	slow, slowMsgs := subscribe(t, store, watermilladapter.SubscriberConfig{LockTimeout: lease, PollInterval: time.Hour, Clock: clock}, "orders")
	late := nextMessage(t, slowMsgs, "the first relay delivered nothing")
	second, secondMsgs := subscribe(t, store, watermilladapter.SubscriberConfig{PollInterval: poll, Clock: clock}, "orders")
	again := nextMessageOnClock(t, clock, poll, secondMsgs, "the second relay delivered nothing after the lease")
	require.False(t, clock.Now().Before(testStart.Add(lease)), "delivered again before the lease ended")

	late.Nack()
	require.NoError(t, slow.Close(), "Close records the outcome")
	e := eventStatus(t, store, late)
	require.Equal(t, outbox.StatusNew, e.Status)
	require.Zero(t, e.Attempts)
	require.Equal(t, second.Owner(), e.LockedBy, "the second relay's lease holds")

	again.Ack()
	advanceUntilDone(t, clock, pool, 1)
}

// A handler that does not answer: once the claim ran out, the same relay
// claims the event again and delivers it to another handler, as another
// relay would, instead of holding it lease after lease because its first
// delivery is still in flight.
func TestEventOfAHungHandlerIsDeliveredAgainAfterTheLease(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	store := storeWithBacklog(t, pool, clock, 1)
	const lease, poll = 2 * time.Second, 50 * time.Millisecond
	_, msgs := subscribe(t, store, watermilladapter.SubscriberConfig{LockTimeout: lease, PollInterval: poll, WorkerCount: 2,
		Clock: clock, RetryPolicy: outbox.Backoff{Base: time.Hour, NoJitter: true}}, "orders")

	hung := nextMessage(t, msgs, "nothing delivered") // not answered in time
	again := nextMessageOnClock(t, clock, poll, msgs, "not delivered again after the lease")
	require.Equal(t, hung.Metadata.Get(watermilladapter.MetadataEventID), again.Metadata.Get(watermilladapter.MetadataEventID))
	require.False(t, clock.Now().Before(testStart.Add(lease)), "delivered again before the lease ended")

	// The first handler fails at last: a failed attempt, recorded, which
	// the second delivery's Ack then overrides.
	hung.Nack()
	relaytest.AdvanceUntil(t, clock, watermilladapter.SettleLinger, "the late failure recorded", func() bool {
		e := eventStatus(t, store, again)
		return e.Status == outbox.StatusRetry && e.Attempts == 1
	})
	again.Ack()
	advanceUntilDone(t, clock, pool, 1)
}

// Logged when an event is left to the next claim: by a worker that waited
// half the event's claim to hand it over, or that found it half spent in
// the queue.
const (
	leftWaitingForTheReader = watermilladapter.DropReader
	leftInTheQueue          = watermilladapter.DropQueued
)

// deliveryCount counts deliveries by event id.
type deliveryCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *deliveryCount) add(msg *message.Message) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == nil {
		d.n = map[string]int{}
	}
	d.n[msg.Metadata.Get(watermilladapter.MetadataEventID)]++
}

// readAll counts and acks the messages of msgs until the channel closes,
// and returns a channel closed then.
func (d *deliveryCount) readAll(msgs <-chan *message.Message) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for msg := range msgs {
			d.add(msg)
			msg.Ack()
		}
	}()
	return done
}

// queueLease is the lease of relayOfOneReader: an event still waiting
// after half of it is left to the next claim.
const queueLease = 2 * time.Second

// leftToAnotherRelay runs the relay a on store (its messages amsgs, its
// notices in logger) whose reader holds the first of the n events of
// pool's table while the others wait, past half their claims, for a worker
// or for the reader: they must be left to the next claim, wanted times
// logged with prefix, and claimed and delivered by another relay once the
// claims ended, each event once.
func leftToAnotherRelay(t *testing.T, pool *pgxpool.Pool, store *postgres.Store, clock *clocktest.Clock,
	a *watermilladapter.Subscriber, amsgs <-chan *message.Message, logger *logtest.Capture, n int, cause string) {
	t.Helper()
	var deliveries deliveryCount
	held := nextMessage(t, amsgs, "the first event")
	deliveries.add(held)
	clock.Advance(queueLease / 2) // the handler takes half the claims of the others
	held.Ack()
	relaytest.Eventually(t, "the others left to the next claim", func() bool { return watermilladapter.Drops(a, cause) == n-1 })
	// Counted, and logged once: the first at once, the others with the
	// next line, a minute later at the earliest.
	logged := logger.Find(slog.LevelWarn, cause)
	require.Len(t, logged, 1)
	require.Equal(t, map[string]any{"topic": "orders", "events": int64(1), "per": time.Minute}, logged[0].Attrs)
	advanceUntilDone(t, clock, pool, 1)
	aRead := deliveries.readAll(amsgs) // whatever relay a hands over from now on

	b, bmsgs := subscribe(t, store, watermilladapter.SubscriberConfig{Owner: "relay-b", PollInterval: 50 * time.Millisecond,
		Clock: clock}, "orders")
	bRead := deliveries.readAll(bmsgs)
	advanceUntilDone(t, clock, pool, n)
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	<-aRead
	<-bRead
	require.Len(t, deliveries.n, n)
	for id, times := range deliveries.n {
		require.Equal(t, 1, times, "deliveries of %s", id)
	}
}

// relayOfOneReader subscribes relay a to "orders" on store with cfg, a
// lease of queueLease and no poll before the test ends; it logs to the
// logger returned.
func relayOfOneReader(t *testing.T, store *postgres.Store, clock *clocktest.Clock, cfg watermilladapter.SubscriberConfig) (*watermilladapter.Subscriber, <-chan *message.Message, *logtest.Capture) {
	t.Helper()
	logger, captured := logtest.New()
	cfg.Owner, cfg.LockTimeout, cfg.PollInterval, cfg.Clock, cfg.Logger = "relay-a", queueLease, time.Hour, clock, logger
	sub, msgs := subscribe(t, store, cfg, "orders")
	return sub, msgs, captured
}

// A reader that takes one message at a time (for msg := range out) keeps
// the other workers waiting to hand theirs over. An event whose claim ran
// half out meanwhile is left to the next claim rather than handed over
// late, when another relay may have claimed and delivered it already.
func TestEventWaitingForTheReaderIsLeftToTheNextClaim(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	const events = 4
	store := storeWithBacklog(t, pool, clock, events)
	a, msgs, logger := relayOfOneReader(t, store, clock, watermilladapter.SubscriberConfig{
		WorkerCount: events, BatchSize: events, ColdQueueCapacity: events})
	// Every worker waits to hand its event over, for half the event's
	// claim at most; the reader then takes one.
	require.True(t, clock.WaitForTimersOf(events, queueLease/2, relaytest.WaitLimit), "the workers wait: %v", clock.Armed())
	leftToAnotherRelay(t, pool, store, clock, a, msgs, logger, events, leftWaitingForTheReader)
}

// Slow handlers behind a full cold queue: the claims of the events at the
// back of the queue run out before a worker takes them. Another relay
// then claims and delivers them, and the first must not deliver them too:
// nothing crashed, so nothing may be delivered twice.
func TestEventWhoseClaimRanOutInTheQueueIsNotDeliveredAgain(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	const events = 10
	store := storeWithBacklog(t, pool, clock, events)
	a, msgs, logger := relayOfOneReader(t, store, clock, watermilladapter.SubscriberConfig{
		WorkerCount: 1, BatchSize: events, ColdQueueCapacity: events})
	leftToAnotherRelay(t, pool, store, clock, a, msgs, logger, events, leftInTheQueue)
}

// The same on the hot path: events committed faster than a slow handler
// takes them wait in the hot queue, where the claims they were written
// with run out; another relay's cold path then claims them while they
// still wait.
func TestHotEventWhoseClaimRanOutInTheQueueIsNotDeliveredAgain(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	store, err := postgres.NewStore(pool, postgres.Config{Clock: clock})
	require.NoError(t, err)
	const events = 10
	a, msgs, logger := relayOfOneReader(t, store, clock, watermilladapter.SubscriberConfig{
		WorkerCount: 1, HotQueueCapacity: events})
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: a, OwnTransaction: true})
	require.NoError(t, err)
	for i := range events {
		require.NoError(t, pub.Publish("orders", newMsg(fmt.Sprint(i))))
	}
	leftToAnotherRelay(t, pool, store, clock, a, msgs, logger, events, leftInTheQueue)
}

// spyClock is the system clock whose timers tell what they were reset
// for: the hand-over's wait for half a claim is the only wait of the
// relay reset for longer than spyLong.
type spyClock struct {
	outbox.SystemClock
	mu     sync.Mutex
	resets map[*spyTimer]int // long resets of each timer
}

const spyLong = 200 * time.Millisecond

type spyTimer struct {
	*time.Timer
	clock *spyClock
}

func (c *spyClock) NewTimer(d time.Duration) outbox.Timer {
	return &spyTimer{Timer: time.NewTimer(d), clock: c}
}

func (t *spyTimer) C() <-chan time.Time { return t.Timer.C }

func (t *spyTimer) Reset(d time.Duration) bool {
	if d > spyLong {
		t.clock.mu.Lock()
		if t.clock.resets == nil {
			t.clock.resets = map[*spyTimer]int{}
		}
		t.clock.resets[t]++
		t.clock.mu.Unlock()
	}
	return t.Timer.Reset(d)
}

// waitForLongResets waits until a timer was reset for long n times, and
// returns it.
func (c *spyClock) waitForLongResets(t *testing.T, n int) *spyTimer {
	t.Helper()
	var found *spyTimer
	relaytest.Eventually(t, fmt.Sprint(n, " long resets of a timer"), func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for timer, resets := range c.resets {
			if resets >= n {
				found = timer
				return true
			}
		}
		return false
	})
	return found
}

// A worker's hand-over timer is left running between events. Under
// GODEBUG=asynctimerchan=1 a timer keeps the time it sent while nobody
// received it, for a later receive: the next hand-over that waits must not
// take that time for its own and leave its event to the next claim. The
// test runs itself again in a process with that setting, on the runtime's
// timers, which are what the setting changes.
func TestHandOverIgnoresAStaleTimerTime(t *testing.T) {
	const child = "WMOUTBOX_TEST_ASYNC_TIMERS"
	if os.Getenv(child) == "" {
		t.Parallel()
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHandOverIgnoresAStaleTimerTime$", "-test.count=1")
		cmd.Env = append(os.Environ(), "GODEBUG=asynctimerchan=1", child+"=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return
	}
	pool := testdb.New(t)
	store := storeWithBacklog(t, pool, nil, 1)
	clock := &spyClock{}
	_, msgs := subscribe(t, store, watermilladapter.SubscriberConfig{
		LockTimeout: time.Second, PollInterval: 100 * time.Millisecond, WorkerCount: 1, Clock: clock}, "orders")
	worker := clock.waitForLongResets(t, 1) // the worker waits to hand the event over
	nextMessage(t, msgs, "the first event").Ack()
	relaytest.Eventually(t, "the hand-over's timer to fire at half the claim, unreceived", func() bool {
		return len(worker.Timer.C) == 1
	})
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{OwnTransaction: true})
	require.NoError(t, err)
	require.NoError(t, pub.Publish("orders", newMsg("second")))
	// The worker waits to hand the second event over: its first wait ends
	// at once with the stale time, and it waits again for the rest.
	require.Same(t, worker, clock.waitForLongResets(t, 3))
	nextMessage(t, msgs, "the second event").Ack()
}
