package watermilladapter_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
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

// Log mode (SubscriberConfig.Feed), with a feed the test drives: it
// streams the transactions the test names, reading their rows from the
// table as a log would carry them, and records what the relay settles.

// scriptFeed streams the transactions sent on txs.
type scriptFeed struct {
	store   *postgres.Store
	txs     chan []string
	covered chan time.Time
	reads   chan bool
	settled chan int // the number of each transaction settled, from 1
	streams atomic.Int32
}

func newScriptFeed(store *postgres.Store) *scriptFeed {
	return &scriptFeed{store: store, txs: make(chan []string), covered: make(chan time.Time), reads: make(chan bool),
		settled: make(chan int, 100)}
}

func (f *scriptFeed) Stream(ctx context.Context, h outboxdriver.FeedHandler) error {
	f.streams.Add(1)
	h.Reading(true)
	for n := 1; ; {
		select {
		case <-ctx.Done():
			return nil
		case t := <-f.covered:
			h.Covered(t)
		case reading := <-f.reads:
			h.Reading(reading)
		case ids := <-f.txs:
			number := n
			tx := outboxdriver.FeedTransaction{CommitTime: time.Now(), Settled: func() { f.settled <- number }}
			for _, id := range ids {
				r, ok, err := f.store.Driver().Get(ctx, id)
				if err != nil || !ok {
					return errors.Join(err, errors.New("no row "+id))
				}
				tx.Events = append(tx.Events, r)
			}
			if err := h.Transaction(ctx, tx); err != nil {
				return nil
			}
			n++
		}
	}
}

// stream streams ids as one transaction, failing the test if the relay
// does not take it in time.
func (f *scriptFeed) stream(t *testing.T, ids ...string) {
	t.Helper()
	select {
	case f.txs <- ids:
	case <-time.After(relaytest.WaitLimit):
		t.Fatal("the relay does not take the transaction")
	}
}

// read tells the relay that the feed reads, or stands by.
func (f *scriptFeed) read(t *testing.T, reading bool) {
	t.Helper()
	select {
	case f.reads <- reading:
	case <-time.After(relaytest.WaitLimit):
		t.Fatal("the feed does not stream")
	}
}

func (f *scriptFeed) cover(t *testing.T, at time.Time) {
	t.Helper()
	select {
	case f.covered <- at:
	case <-time.After(relaytest.WaitLimit):
		t.Fatal("the feed does not stream")
	}
}

// claimTracer counts the relay's claims, as a Tracer sees them.
type claimTracer struct{ n atomic.Int64 }

func (c *claimTracer) StartStatement(ctx context.Context, st watermilladapter.Statement) (context.Context, func(int, error)) {
	if st.Operation == watermilladapter.OperationClaim {
		c.n.Add(1)
	}
	return ctx, func(int, error) {}
}

// waitClaims moves clock on until the relay has made n more claims.
func (c *claimTracer) waitClaims(t *testing.T, clock *clocktest.Clock, step time.Duration, n int64) {
	t.Helper()
	target := c.n.Load() + n
	relaytest.AdvanceUntil(t, clock, step, "claims", func() bool { return c.n.Load() >= target })
}

// logTest is a relay in log mode on a fresh database, on a test clock.
type logTest struct {
	*relaytest.Relay
	pool   *pgxpool.Pool
	feed   *scriptFeed
	clock  *clocktest.Clock
	claims *claimTracer
}

// logRelay starts a relay in log mode with handler for "orders", polling
// every 10 ms of its clock.
func logRelay(t *testing.T, cfg watermilladapter.SubscriberConfig, handler message.NoPublishHandlerFunc) *logTest {
	t.Helper()
	lt := &logTest{pool: testdb.New(t), clock: clocktest.New(testStart), claims: &claimTracer{}}
	store, err := postgres.NewStore(lt.pool, postgres.Config{Clock: lt.clock})
	require.NoError(t, err)
	lt.feed = newScriptFeed(store)
	cfg.Feed, cfg.Tracer, cfg.PollInterval = lt.feed, lt.claims, 10*time.Millisecond
	lt.Relay = relaytest.StartOnClock(t, lt.pool, lt.clock, cfg, relaytest.Handlers{"orders": handler})
	return lt
}

func TestLogModeDeliversTheStreamAndSettlesOnceRecorded(t *testing.T) {
	t.Parallel()
	got := newReceived()
	lt := logRelay(t, watermilladapter.SubscriberConfig{}, got.handler)
	r, feed, clock, claims := lt.Relay, lt.feed, lt.clock, lt.claims
	ids := writeCold(t, r.Store, orderEvent("1"), orderEvent("2"), orderEvent("3"), orderEvent("not streamed"))

	claims.waitClaims(t, clock, 10*time.Millisecond, 3)
	noMessage(t, got.ch, "a claim took a NEW event the feed holds")

	feed.stream(t, ids[0], ids[1])
	feed.stream(t, ids[2])
	for range 3 {
		msg := nextMessageOnClock(t, clock, time.Millisecond, got.ch, "a streamed event")
		require.Equal(t, watermilladapter.SourceLog, msg.Metadata.Get(watermilladapter.MetadataSource))
	}
	// Each transaction is checked on its own events only: the other may
	// still be on its way to the settler.
	txEvents := map[int][]string{1: ids[:2], 2: ids[2:3]}
	var settled []int
	relaytest.AdvanceUntil(t, clock, watermilladapter.SettleLinger, "both transactions settled", func() bool {
		select {
		case n := <-feed.settled:
			settled = append(settled, n)
			for _, id := range txEvents[n] {
				require.Equal(t, outbox.StatusDone, statusOf(t, r.Store, id).Status, "settled before its DONE was recorded")
			}
		default:
		}
		return len(settled) == 2
	})
	require.ElementsMatch(t, []int{1, 2}, settled)

	claims.waitClaims(t, clock, 10*time.Millisecond, 3)
	noMessage(t, got.ch, "the event not streamed is claimed before the feed covers it")
	require.Equal(t, outbox.StatusNew, statusOf(t, r.Store, ids[3]).Status)

	feed.cover(t, clock.Now())
	msg := nextMessageOnClock(t, clock, 10*time.Millisecond, got.ch, "the covered event, claimed")
	require.Equal(t, ids[3], msg.Metadata.Get(watermilladapter.MetadataEventID))
	require.Equal(t, watermilladapter.SourceCold, msg.Metadata.Get(watermilladapter.MetadataSource))
	require.False(t, r.Sub.TakesHot("orders"), "no hot path in log mode")
}

func TestLogModeRetriesAStreamedEventThroughClaims(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	got := newReceived()
	lt := logRelay(t, watermilladapter.SubscriberConfig{
		RetryPolicy: outbox.Backoff{Base: time.Second, MaxAttempts: 3, NoJitter: true},
	}, func(msg *message.Message) error {
		if calls.Add(1) == 1 {
			return errors.New("downstream down")
		}
		return got.handler(msg)
	})
	r, feed, clock := lt.Relay, lt.feed, lt.clock
	ids := writeCold(t, r.Store, orderEvent("x"))
	feed.stream(t, ids...)
	relaytest.AdvanceUntil(t, clock, time.Millisecond, "the RETRY recorded", func() bool {
		return statusOf(t, r.Store, ids[0]).Status == outbox.StatusRetry
	})
	select {
	case <-feed.settled:
	case <-time.After(relaytest.WaitLimit):
		t.Fatal("the failed event's transaction is not settled")
	}
	msg := nextMessageOnClock(t, clock, 100*time.Millisecond, got.ch, "the retry, claimed though the feed covers nothing")
	require.Equal(t, watermilladapter.SourceCold, msg.Metadata.Get(watermilladapter.MetadataSource))
	require.Equal(t, "2", msg.Metadata.Get(watermilladapter.MetadataAttempt))
	advanceUntilDone(t, clock, lt.pool, 1)
}

// Ordered, a failed event parks its aggregate: the events after it, in
// the worker's lane or streamed later, wait for it and then follow it
// through claims, while other aggregates go on from the stream.
func TestLogModeOrderedParksAFailedAggregate(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		order []string
		fail  atomic.Bool
	)
	fail.Store(true)
	got := newReceived()
	lt := logRelay(t, watermilladapter.SubscriberConfig{Ordered: true, WorkerCount: 4,
		RetryPolicy: outbox.Backoff{Base: time.Second, MaxAttempts: 3, NoJitter: true},
	}, func(msg *message.Message) error {
		if string(msg.Payload) == "a1" && fail.CompareAndSwap(true, false) {
			return errors.New("downstream down")
		}
		mu.Lock()
		order = append(order, string(msg.Payload))
		mu.Unlock()
		return got.handler(msg)
	})
	event := func(aggregate, payload string) outbox.Envelope {
		e := orderEvent(payload)
		e.AggregateType, e.AggregateID = "Order", aggregate
		return e
	}
	r, feed, clock := lt.Relay, lt.feed, lt.clock
	first := writeCold(t, r.Store, event("a", "a1"), event("a", "a2"), event("b", "b1"))
	feed.stream(t, first...)
	later := writeCold(t, r.Store, event("a", "a3"), event("b", "b2"))
	feed.stream(t, later...)

	var sources = map[string]string{}
	relaytest.AdvanceUntil(t, clock, 50*time.Millisecond, "every event delivered", func() bool {
		select {
		case msg := <-got.ch:
			sources[string(msg.Payload)] = msg.Metadata.Get(watermilladapter.MetadataSource)
		default:
		}
		return len(sources) == 5
	})
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"a1", "a2", "a3"}, onlyPrefix(order, "a"), "aggregate a in order")
	require.Equal(t, []string{"b1", "b2"}, onlyPrefix(order, "b"))
	// a3 comes from the claims, or from the stream when the claims had
	// delivered a1 and a2 before the feed handed a3 over.
	require.Contains(t, []string{"cold", "log"}, sources["a3"])
	delete(sources, "a3")
	require.Equal(t, map[string]string{"a1": "cold", "a2": "cold", "b1": "log", "b2": "log"}, sources)
}

func onlyPrefix(s []string, prefix string) []string {
	var out []string
	for _, v := range s {
		if v[:len(prefix)] == prefix {
			out = append(out, v)
		}
	}
	return out
}

// Events streamed while Close runs are not settled: the next run streams
// them again.
func TestLogModeCloseLeavesTheRestToTheNextRun(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	store, err := postgres.NewStore(pool, postgres.Config{Clock: clock})
	require.NoError(t, err)
	feed := newScriptFeed(store)
	block := make(chan struct{})
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{Feed: feed, Clock: clock,
		WorkerCount: 1, HotQueueCapacity: 1, DrainTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	msgs, err := sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	go func() {
		for msg := range msgs {
			if string(msg.Payload) == "1" { // the others are never answered
				<-block
				msg.Ack()
			}
		}
	}()
	ids := writeCold(t, store, orderEvent("1"), orderEvent("2"), orderEvent("3"))
	for _, id := range ids {
		feed.stream(t, id)
	}
	closed := make(chan error, 1)
	go func() { closed <- relaytest.Close(t, sub, clock) }()
	close(block)
	require.NoError(t, <-closed)
	require.Equal(t, 1, <-feed.settled, "the acked event's transaction")
	select {
	case n := <-feed.settled:
		t.Fatalf("transaction %d settled, though its event was not delivered", n)
	default:
	}
	require.Equal(t, outbox.StatusDone, statusOf(t, store, ids[0]).Status)
	for _, id := range ids[1:] {
		require.Equal(t, outbox.StatusNew, statusOf(t, store, id).Status)
	}
}

// orderedLogTest is an ordered relay in log mode with 4 workers,
// recording the order of the payloads its handler gets and their sources.
type orderedLogTest struct {
	*logTest
	got   *received
	mu    sync.Mutex
	order []string
}

func orderedLogRelay(t *testing.T) *orderedLogTest {
	t.Helper()
	ot := &orderedLogTest{got: newReceived()}
	ot.logTest = logRelay(t, watermilladapter.SubscriberConfig{Ordered: true, WorkerCount: 4}, func(msg *message.Message) error {
		ot.mu.Lock()
		ot.order = append(ot.order, string(msg.Payload))
		ot.mu.Unlock()
		return ot.got.handler(msg)
	})
	return ot
}

// aggregateEvent is an event of aggregate Order/id with payload.
func aggregateEvent(id, payload string) outbox.Envelope {
	e := orderEvent(payload)
	e.AggregateType, e.AggregateID = "Order", id
	return e
}

// leaveRetry records what another relay's Nack of id would have: a RETRY
// due in a second.
func (ot *orderedLogTest) leaveRetry(t *testing.T, id string) {
	t.Helper()
	_, err := ot.pool.Exec(t.Context(), `UPDATE outbox_event SET status = $2, attempts = 1, available_at = $3 WHERE event_id = $1`,
		id, int16(outbox.StatusRetry), ot.clock.Now().Add(time.Second))
	require.NoError(t, err)
}

// sources waits for n deliveries, and returns the source of each payload.
func (ot *orderedLogTest) sources(t *testing.T, n int) map[string]string {
	t.Helper()
	sources := map[string]string{}
	relaytest.AdvanceUntil(t, ot.clock, 50*time.Millisecond, "every event delivered", func() bool {
		select {
		case msg := <-ot.got.ch:
			sources[string(msg.Payload)] = msg.Metadata.Get(watermilladapter.MetadataSource)
		default:
		}
		return len(sources) == n
	})
	return sources
}

func (ot *orderedLogTest) delivered(prefix string) []string {
	ot.mu.Lock()
	defer ot.mu.Unlock()
	return onlyPrefix(ot.order, prefix)
}

// Ordered, an aggregate whose earlier event another reader of the slot
// left unfinished in the table (a RETRY here, behind the slot's confirmed
// position, which no stream brings again) is parked at its first
// streamed event: the events after it follow it through claims.
func TestLogModeOrderedWaitsForAnEarlierEventLeftInTheTable(t *testing.T) {
	t.Parallel()
	ot := orderedLogRelay(t)
	ot.leaveRetry(t, writeCold(t, ot.Store, aggregateEvent("a", "a1"))[0])
	ot.feed.stream(t, writeCold(t, ot.Store, aggregateEvent("a", "a2"), aggregateEvent("b", "b1"))...)
	ot.feed.stream(t, writeCold(t, ot.Store, aggregateEvent("a", "a3"))...)

	sources := ot.sources(t, 4)
	require.Equal(t, []string{"a1", "a2", "a3"}, ot.delivered("a"), "aggregate a in order")
	require.Equal(t, map[string]string{"a1": "cold", "a2": "cold", "a3": "cold", "b1": "log"}, sources)
}

// A feed that stood by and reads again looks the aggregates up again:
// while it stood by, the reader of the slot may have left one's event
// unfinished.
func TestLogModeOrderedLooksAggregatesUpAgainAfterStandingBy(t *testing.T) {
	t.Parallel()
	ot := orderedLogRelay(t)
	ot.feed.stream(t, writeCold(t, ot.Store, aggregateEvent("a", "a1"))...)
	require.Equal(t, map[string]string{"a1": "log"}, ot.sources(t, 1))
	advanceUntilDone(t, ot.clock, ot.pool, 1)

	ot.feed.read(t, false)
	ot.leaveRetry(t, writeCold(t, ot.Store, aggregateEvent("a", "a2"))[0]) // the other reader's
	ot.feed.read(t, true)
	ot.feed.stream(t, writeCold(t, ot.Store, aggregateEvent("a", "a3"))...)

	require.Equal(t, map[string]string{"a2": "cold", "a3": "cold"}, ot.sources(t, 2))
	require.Equal(t, []string{"a1", "a2", "a3"}, ot.delivered("a"), "aggregate a in order")
}

// A parked aggregate goes back to the stream at its first streamed event
// that the claims have caught up with: every earlier event DONE. That
// event is leased while delivered, so that no claim takes it too.
func TestLogModeOrderedTakesAParkedAggregateBackToTheStream(t *testing.T) {
	t.Parallel()
	ot := orderedLogRelay(t)
	ot.leaveRetry(t, writeCold(t, ot.Store, aggregateEvent("a", "a1"))[0])
	ot.feed.stream(t, writeCold(t, ot.Store, aggregateEvent("a", "a2"))...)
	// a2 is streamed while a1 waits: both come from the claims.
	require.Equal(t, map[string]string{"a1": "cold", "a2": "cold"}, ot.sources(t, 2))
	advanceUntilDone(t, ot.clock, ot.pool, 2)
	// The claim of a's next event that a2's DONE asks for runs before a3
	// is written: a claim that found a3 would deliver it, and rightly.
	ot.claims.waitClaims(t, ot.clock, 10*time.Millisecond, 2)

	a3 := writeCold(t, ot.Store, aggregateEvent("a", "a3"))
	ot.feed.stream(t, a3...)
	ot.feed.stream(t, writeCold(t, ot.Store, aggregateEvent("a", "a4"))...)
	require.Equal(t, map[string]string{"a3": "log", "a4": "log"}, ot.sources(t, 2))
	require.Equal(t, []string{"a1", "a2", "a3", "a4"}, ot.delivered("a"), "aggregate a in order")
	advanceUntilDone(t, ot.clock, ot.pool, 4)
	e := statusOf(t, ot.Store, a3[0])
	require.Equal(t, outbox.StatusDone, e.Status, "a3's DONE recorded")
	require.Empty(t, e.LockedBy)
}

// unfinishedDown is a PostgreSQL driver whose look-ups of unfinished
// events fail.
type unfinishedDown struct{ outboxdriver.Driver[pgx.Tx] }

func (unfinishedDown) UnfinishedBefore(context.Context, outboxdriver.UnfinishedBeforeParams) ([]bool, error) {
	return nil, errors.New("database unreachable")
}

func (unfinishedDown) LeaseFirst(context.Context, outboxdriver.LeaseFirstParams) ([]outboxdriver.Row, error) {
	return nil, errors.New("database unreachable")
}

// When the look-up fails, the aggregates are parked all the same: the
// order holds, at the claims' pace.
func TestLogModeOrderedParksWhatItCannotLookUp(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	store, err := postgres.NewStore(pool, postgres.Config{Clock: clock})
	require.NoError(t, err)
	feed := newScriptFeed(store)
	logger, logs := logtest.New()
	_, msgs := subscribe(t, storeOn(t, unfinishedDown{store.Driver()}, clock), watermilladapter.SubscriberConfig{
		Feed: feed, Ordered: true, Clock: clock, Logger: logger, PollInterval: 10 * time.Millisecond}, "orders")
	feed.stream(t, writeCold(t, store, aggregateEvent("a", "a1"))...)
	msg := nextMessageOnClock(t, clock, 10*time.Millisecond, msgs, "the parked event, claimed")
	require.Equal(t, watermilladapter.SourceCold, msg.Metadata.Get(watermilladapter.MetadataSource))
	msg.Ack()
	require.Len(t, logs.Find(slog.LevelWarn, "outbox: cannot tell whether streamed aggregates have unfinished events; leaving them to ordered claims"), 1)
}

// An ordered relay in log mode needs a driver that orders a feed.
func TestLogModeOrderedNeedsAFeedOrderer(t *testing.T) {
	t.Parallel()
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{})
	require.NoError(t, err)
	plain := storeOn(t, struct{ outboxdriver.Driver[pgx.Tx] }{store.Driver()}, outbox.SystemClock{})
	cfg := watermilladapter.SubscriberConfig{Feed: newScriptFeed(store), Ordered: true}
	_, err = watermilladapter.NewSubscriber(plain, cfg)
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	cfg.Ordered = false
	sub, err := watermilladapter.NewSubscriber(plain, cfg)
	require.NoError(t, err, "unordered, nothing is looked up")
	require.NoError(t, sub.Close())
}
