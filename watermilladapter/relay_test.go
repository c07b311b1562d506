package watermilladapter_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/syncbuf"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// received collects delivered messages.
type received struct {
	mu   sync.Mutex
	msgs []*message.Message
	ch   chan *message.Message
}

func newReceived() *received { return &received{ch: make(chan *message.Message, 100000)} }

func (rc *received) handler(msg *message.Message) error {
	rc.mu.Lock()
	rc.msgs = append(rc.msgs, msg)
	rc.mu.Unlock()
	rc.ch <- msg
	return nil
}

func (rc *received) next(t *testing.T) *message.Message {
	t.Helper()
	return nextMessage(t, rc.ch, "no message delivered in time")
}

// nextMessage returns the next message of msgs, failing the test with why
// after WaitLimit.
func nextMessage(t *testing.T, msgs <-chan *message.Message, why string) *message.Message {
	t.Helper()
	select {
	case m := <-msgs:
		return m
	case <-time.After(relaytest.WaitLimit):
		t.Fatal(why)
		return nil
	}
}

func eventStatus(t *testing.T, store *postgres.Store, msg *message.Message) outbox.Event {
	t.Helper()
	e, err := store.Get(t.Context(), msg.Metadata.Get(watermilladapter.MetadataEventID))
	require.NoError(t, err)
	return e
}

func statusOf(t *testing.T, store *postgres.Store, id string) outbox.Event {
	t.Helper()
	e, err := store.Get(t.Context(), id)
	require.NoError(t, err)
	return e
}

func onlyEventID(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var id string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT event_id FROM outbox_event`).Scan(&id))
	return id
}

// rowCount is how many rows the outbox table holds, in any status.
func rowCount(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event`).Scan(&n))
	return n
}

// deadWhile is a handler that makes a message DEAD at once while
// fails(msg) holds, and hands it to got otherwise.
func deadWhile(fails func(*message.Message) bool, got *received) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		if fails(msg) {
			return outbox.Permanent(errors.New("bug in consumer"))
		}
		return got.handler(msg)
	}
}

func newMsg(payload string) *message.Message {
	return message.NewMessage(watermill.NewUUID(), []byte(payload))
}

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
			relaytest.Eventually(t, "both DONE", func() bool {
				var done int
				require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event WHERE status = 1`).Scan(&done))
				return done == 2
			})
			require.Len(t, ids, 2)
			require.NoError(t, notifier.Close())
			require.NotContains(t, logs.String(), "notify failed")
		})
	}
}

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
	relaytest.Eventually(t, "all DONE", func() bool {
		var done int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event WHERE status = 1`).Scan(&done))
		return done == 5
	})
}

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

func TestRetryAfterKeepsAttempts(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	got := newReceived()
	var once sync.Once
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{PollInterval: time.Hour}, relaytest.Handlers{"orders": func(msg *message.Message) error {
		var err error
		once.Do(func() { err = outbox.RetryAfter(100*time.Millisecond, errors.New("rate limited")) })
		if err != nil {
			return err
		}
		return got.handler(msg)
	}})
	start := time.Now()
	r.Publish(t, "orders", newMsg("x"))
	msg := got.next(t)
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "delivered again after the delay")
	require.Equal(t, "1", msg.Metadata.Get(watermilladapter.MetadataAttempt), "no attempt spent")
	require.Equal(t, watermilladapter.SourceCold, msg.Metadata.Get(watermilladapter.MetadataSource))
	relaytest.Eventually(t, "DONE", func() bool { return eventStatus(t, r.Store, msg).Status == outbox.StatusDone })
	e := eventStatus(t, r.Store, msg)
	require.Zero(t, e.Attempts)
	require.Contains(t, e.LastError, "rate limited")
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

func TestDelayedDeliverySkipsHotPath(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	got := newReceived()
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, relaytest.Handlers{"orders": got.handler})
	due := time.Now().Add(300 * time.Millisecond)
	msg := newMsg("later")
	msg.Metadata.Set(watermilladapter.MetadataDeliverAfter, due.Format(time.RFC3339Nano))
	r.Publish(t, "orders", msg)
	delivered := got.next(t)
	require.False(t, time.Now().Before(due), "not before its time")
	require.Equal(t, watermilladapter.SourceCold, delivered.Metadata.Get(watermilladapter.MetadataSource))

	past := newMsg("due an hour ago")
	past.Metadata.Set(watermilladapter.MetadataDeliverAfter, time.Now().Add(-time.Hour).Format(time.RFC3339Nano))
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
			r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{PollInterval: time.Hour, Ordered: ordered},
				relaytest.Handlers{"orders": got.handler})
			due := time.Now().Add(300 * time.Millisecond)
			msg := newMsg("later")
			msg.Metadata.Set(watermilladapter.MetadataAggregateID, "order-1")
			msg.Metadata.Set(watermilladapter.MetadataDeliverAfter, due.Format(time.RFC3339Nano))
			r.Publish(t, "orders", msg)
			delivered := got.next(t)
			require.Equal(t, "later", string(delivered.Payload))
			require.False(t, time.Now().Before(due), "not before its time")
		})
	}
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

// An event committed by a process with no relay for its topic reaches a
// relay of another process at once: the writer's Notifier wakes that
// relay's Listener, whose poll interval alone would take an hour.
func TestCommitInOneProcessWakesTheRelayOfAnother(t *testing.T) {
	t.Parallel()
	pools := twoProcesses(t)

	got := newReceived()
	relay := relaytest.Start(t, pools[0], watermilladapter.SubscriberConfig{PollInterval: time.Hour}, relaytest.Handlers{"orders": got.handler})
	listener, err := postgres.Listen(pools[0], postgres.Config{}, relay.Sub.Wake)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, listener.Close()) })

	writer := relaytest.Start(t, pools[1], watermilladapter.SubscriberConfig{}, nil)
	notifier, err := postgres.NewNotifier(pools[1], postgres.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, notifier.Close()) })
	writer.Pub, err = watermilladapter.NewPublisher(writer.Store, watermilladapter.PublisherConfig{Notify: notifier.Notify})
	require.NoError(t, err)

	// The first event may be found by the relay's first claim; the second
	// comes after it, when only a wake-up can bring it within the hour.
	for _, payload := range []string{"first", "second"} {
		writer.Publish(t, "orders", newMsg(payload))
		require.Equal(t, payload, string(got.next(t).Payload))
	}
}

// twoProcesses returns two pools on one fresh database, as two processes
// would have.
func twoProcesses(t *testing.T) []*pgxpool.Pool {
	url := testdb.URL(t)
	pools := make([]*pgxpool.Pool, 2)
	for i := range pools {
		pool, err := pgxpool.New(t.Context(), url)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		pools[i] = pool
	}
	return pools
}

// Claims a relay hands back at Close reach a relay of another process at
// once when the closing relay's Notify announces them: that relay's first
// claim found them all claimed, and its poll interval is an hour.
func TestReleaseAtCloseWakesTheRelayOfAnother(t *testing.T) {
	t.Parallel()
	pools := twoProcesses(t)
	const events = 20
	store := storeWithBacklog(t, pools[0], events)

	notifier, err := postgres.NewNotifier(pools[0], postgres.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, notifier.Close()) })
	closing, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		Owner: "closing", PollInterval: time.Hour, DrainTimeout: time.Millisecond, Notify: notifier.Notify})
	require.NoError(t, err)
	if _, err := closing.Subscribe(t.Context(), "orders"); err != nil { // never read: the events wait claimed
		require.NoError(t, err)
	}
	claimedBy := func(owner string) int {
		var n int
		require.NoError(t, pools[0].QueryRow(t.Context(),
			`SELECT count(*) FROM outbox_event WHERE locked_by = $1`, owner).Scan(&n))
		return n
	}
	relaytest.Eventually(t, "every event claimed by the closing relay", func() bool { return claimedBy("closing") == events })

	otherStore, err := postgres.NewStore(pools[1], postgres.Config{})
	require.NoError(t, err)
	counted := &claimCounter{Store: otherStore}
	other, err := watermilladapter.NewSubscriber(counted, watermilladapter.SubscriberConfig{Owner: "other", PollInterval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, other.Close()) })
	msgs, err := other.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	listening := make(chan struct{}, 1)
	listener, err := postgres.Listen(pools[1], postgres.Config{}, func(topics ...string) {
		other.Wake(topics...)
		select {
		case listening <- struct{}{}:
		default:
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, listener.Close()) })
	select {
	case <-listening:
	case <-time.After(relaytest.WaitLimit):
		t.Fatal("the listener did not listen")
	}
	// Every wake-up so far (the first claim, the listener's at its start,
	// which would find the released events with no notification) is over
	// once a claim that starts after this one has ended: claims of a
	// subscription run one after another.
	started := counted.claims.Load()
	other.Wake("orders")
	relaytest.Eventually(t, "a claim after the listener's first wake-up", func() bool { return counted.ended.Load() > started })
	require.Equal(t, events, claimedBy("closing"))

	require.NoError(t, closing.Close())
	for range events {
		select {
		case msg := <-msgs:
			msg.Ack()
		case <-time.After(relaytest.WaitLimit):
			t.Fatal("the released events did not reach the other relay")
		}
	}
}

// claimCounter is a store that counts the claims made on it.
type claimCounter struct {
	outbox.Store
	claims, ended atomic.Int64 // started and ended
}

func (c *claimCounter) Claim(ctx context.Context, req outbox.ClaimRequest) ([]outbox.Event, error) {
	c.claims.Add(1)
	defer c.ended.Add(1)
	return c.Store.Claim(ctx, req)
}

// subscribeCounted subscribes to "orders" on a subscriber whose claims are
// counted, once its first claim is made; the poll interval is an hour.
func subscribeCounted(t *testing.T, wakeCooldown time.Duration) (*postgres.Store, *claimCounter, *watermilladapter.Subscriber, <-chan *message.Message) {
	t.Helper()
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{})
	require.NoError(t, err)
	counted := &claimCounter{Store: store}
	sub, err := watermilladapter.NewSubscriber(counted, watermilladapter.SubscriberConfig{
		PollInterval: time.Hour, WakeCooldown: wakeCooldown})
	require.NoError(t, err)
	msgs, err := sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	relaytest.Eventually(t, "the first claim", func() bool { return counted.claims.Load() == 1 })
	return store, counted, sub, msgs
}

// Wake-ups within WakeCooldown of a claim make one claim at its end, which
// delivers what they announced: a stream of notifications costs a claim
// per cooldown, not one each.
func TestWakeUpsWithinCooldownMakeOneClaim(t *testing.T) {
	t.Parallel()
	// Long enough for the write and the wake-ups to fall within it on a
	// busy machine.
	const cooldown = 5 * time.Second
	store, counted, sub, msgs := subscribeCounted(t, cooldown)
	defer func() { require.NoError(t, sub.Close()) }()

	writer, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{})
	require.NoError(t, err)
	msg := newMsg("announced")
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, _ pgx.Tx) error {
		msg.SetContext(ctx)
		return writer.Publish("orders", msg)
	}))
	for range 20 {
		sub.Wake("orders")
	}
	got := nextMessage(t, msgs, "the woken claim delivered nothing")
	require.Equal(t, "announced", string(got.Payload))
	got.Ack()
	time.Sleep(cooldown * 3 / 2) // room for claims that should not happen
	require.EqualValues(t, 2, counted.claims.Load(), "the first claim, then one for all the wake-ups")
}

// closeWithin closes sub and returns what Close returns, failing the test
// with why if that takes longer than limit.
func closeWithin(t *testing.T, sub *watermilladapter.Subscriber, limit time.Duration, why string) error {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	select {
	case err := <-closed:
		return err
	case <-time.After(limit):
		t.Fatal(why)
		return nil
	}
}

// Close does not wait for a cooldown to end.
func TestCloseDuringWakeCooldown(t *testing.T) {
	t.Parallel()
	_, counted, sub, msgs := subscribeCounted(t, time.Hour)
	sub.Wake("orders")

	require.NoError(t, closeWithin(t, sub, relaytest.WaitLimit, "Close waited for the cooldown"))
	_, open := <-msgs
	require.False(t, open)
	require.EqualValues(t, 1, counted.claims.Load(), "no claim was woken within the cooldown")
}

// A relay that dies holding claims cannot release them; after the lease
// another relay delivers the events.
func TestCrashedRelaysClaimsAreRecoveredAfterLease(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	writer := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, nil)
	msgs := make([]*message.Message, 20)
	for i := range msgs {
		msgs[i] = newMsg(fmt.Sprint(i))
	}
	writer.Publish(t, "orders", msgs...)
	const lease = 500 * time.Millisecond
	crashedAt := time.Now()
	claimed, err := writer.Store.Claim(t.Context(), outbox.ClaimRequest{Owner: "crashed-relay", LockTimeout: lease, Topics: []string{"orders"}})
	require.NoError(t, err)
	require.Len(t, claimed, 20)

	got := newReceived()
	relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, relaytest.Handlers{"orders": got.handler})
	seen := map[string]bool{}
	for range 20 {
		msg := got.next(t)
		seen[msg.Metadata.Get(watermilladapter.MetadataEventID)] = true
	}
	require.GreaterOrEqual(t, time.Since(crashedAt), lease, "not before the lease ended")
	require.Len(t, seen, 20)
}

// A relay started again under its owner, with ReleaseEarlierClaims, hands
// back the claims its earlier run died holding: their events, and the
// ordered aggregates behind them, go on at once rather than after the
// lease, here an hour.
func TestRestartedRelayReleasesItsEarlierRunsClaims(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	writer := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, nil)
	var msgs []*message.Message
	for _, payload := range []string{"a1", "a2", "b1"} {
		msg := newMsg(payload)
		msg.Metadata.Set(watermilladapter.MetadataAggregateID, payload[:1])
		msgs = append(msgs, msg)
	}
	writer.Publish(t, "orders", msgs...)
	claimed, err := writer.Store.Claim(t.Context(), outbox.ClaimRequest{Owner: "relay-a", LockTimeout: time.Hour,
		Topics: []string{"orders"}, Ordered: true})
	require.NoError(t, err)
	require.Len(t, claimed, 2, "the heads of both aggregates, held by the run that died")

	got := newReceived()
	relaytest.Start(t, pool, watermilladapter.SubscriberConfig{Owner: "relay-a", Ordered: true, ReleaseEarlierClaims: true},
		relaytest.Handlers{"orders": got.handler})
	var payloads []string
	for range 3 {
		payloads = append(payloads, string(got.next(t).Payload))
	}
	require.ElementsMatch(t, []string{"a1", "a2", "b1"}, payloads)
	require.Less(t, slices.Index(payloads, "a1"), slices.Index(payloads, "a2"), "in order: %v", payloads)
}

func TestThreeRelaysDeliverEveryEventOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("10,000 events; skipped with -short")
	}
	const events, writers, perTx = 10000, 4, 10
	url := testdb.URL(t)
	var (
		mu     sync.Mutex
		counts = make(map[string]int, events)
	)
	count := func(msg *message.Message) error {
		mu.Lock()
		counts[msg.Metadata.Get(watermilladapter.MetadataEventID)]++
		mu.Unlock()
		return nil
	}
	relays := make([]*relaytest.Relay, 3)
	var pools []*pgxpool.Pool
	for i := range relays {
		pool, err := pgxpool.New(t.Context(), url)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		pools = append(pools, pool)
		relays[i] = relaytest.Start(t, pool, watermilladapter.SubscriberConfig{Owner: fmt.Sprint("relay-", i), PollInterval: 50 * time.Millisecond},
			relaytest.Handlers{"orders": count})
	}
	var wg sync.WaitGroup
	for w := range writers {
		r := relays[w%len(relays)]
		wg.Go(func() {
			for range events / writers / perTx {
				msgs := make([]*message.Message, perTx)
				for i := range msgs {
					msgs[i] = newMsg(`{"n":1}`)
				}
				r.Publish(t, "orders", msgs...)
			}
		})
	}
	wg.Wait()
	relaytest.Eventually(t, "every event DONE", func() bool {
		var done int
		require.NoError(t, pools[0].QueryRow(t.Context(), `SELECT count(*) FROM outbox_event WHERE status = 1`).Scan(&done))
		return done == events
	})
	mu.Lock()
	defer mu.Unlock()
	dups, perSource := 0, len(counts)
	for _, n := range counts {
		dups += n - 1
	}
	require.Equal(t, events, perSource, "every event delivered")
	require.Zero(t, dups, "duplicate deliveries")
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

// outcomesFail is a store that claims but cannot record outcomes, as when
// the database goes away between the two.
type outcomesFail struct{ *postgres.Store }

func (outcomesFail) UpdateStatus(context.Context, string, ...outbox.StatusUpdate) (int64, error) {
	return 0, errors.New("database unreachable")
}

// Close waits for the outcomes to be recorded, but not forever: with the
// database down it gives up after a bounded time, leaving the events to
// their leases, and says so.
func TestCloseEndsWhileOutcomesCannotBeRecorded(t *testing.T) {
	t.Parallel()
	store := storeWithBacklog(t, testdb.New(t), 1)

	sub, err := watermilladapter.NewSubscriber(outcomesFail{store}, watermilladapter.SubscriberConfig{})
	require.NoError(t, err)
	out, err := sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	msg := nextMessage(t, out, "the event was not delivered")
	id := msg.Metadata.Get(watermilladapter.MetadataEventID)
	msg.Ack()

	err = closeWithin(t, sub, 30*time.Second, "Close still waits for an outcome the database cannot take")
	require.ErrorIs(t, err, watermilladapter.ErrNotRecorded)
	require.ErrorContains(t, err, ": 1 outcomes and releases")
	e, err := store.Get(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, outbox.StatusNew, e.Status, "the outcome was not recorded: the lease brings the event back")
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

// Retries do not wait for a poll (an hour here): neither one due before
// the settler has recorded it (the claim its wake-up brings must come
// after the record, or it finds the event still held), nor one due after
// another retry of the subscription (each retry time is kept, not only the
// earliest).
func TestRetriesAreClaimedWhenDueNotAtThePoll(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	delays := map[string]time.Duration{"soon": time.Millisecond, "first": 200 * time.Millisecond, "second": 600 * time.Millisecond}
	var mu sync.Mutex
	tries := map[string]int{}
	redelivered := make(chan string, len(delays))
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{PollInterval: time.Hour}, relaytest.Handlers{"orders": func(msg *message.Message) error {
		name := string(msg.Payload)
		mu.Lock()
		tries[name]++
		first := tries[name] == 1
		mu.Unlock()
		if first {
			return outbox.RetryAfter(delays[name], errors.New("not yet"))
		}
		redelivered <- name
		return nil
	}})
	for name := range delays {
		r.Publish(t, "orders", newMsg(name))
	}
	got := map[string]bool{}
	for range delays {
		select {
		case name := <-redelivered:
			got[name] = true
		case <-time.After(relaytest.WaitLimit):
			t.Fatalf("redelivered only %v of %d retries before the poll", got, len(delays))
		}
	}
}

// A handler that outlives its lease: another relay claims the event and
// delivers it again. The first relay's late Nack must then change nothing:
// not the second relay's lease, which would let a third take the event
// while the second still works on it, nor the attempts.
func TestOutcomeAfterTheLeaseLeavesTheNewClaimAlone(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	writer := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, nil)
	writer.Publish(t, "orders", newMsg("slow"))

	subscribe := func(cfg watermilladapter.SubscriberConfig) (*watermilladapter.Subscriber, <-chan *message.Message) {
		sub, err := watermilladapter.NewSubscriber(writer.Store, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close() })
		msgs, err := sub.Subscribe(t.Context(), "orders")
		require.NoError(t, err)
		return sub, msgs
	}
	// A lease short enough to wait out, long enough that a busy machine
	// does not spend half of it between the claim and the worker (an
	// event so late is left to a claim, and this relay polls hourly).
	slow, slowMsgs := subscribe(watermilladapter.SubscriberConfig{LockTimeout: 2 * time.Second, PollInterval: time.Hour})
	late := nextMessage(t, slowMsgs, "the first relay delivered nothing")
	second, secondMsgs := subscribe(watermilladapter.SubscriberConfig{PollInterval: 50 * time.Millisecond})
	again := nextMessage(t, secondMsgs, "the second relay delivered nothing after the lease")

	late.Nack()
	require.NoError(t, slow.Close(), "Close records the outcome")
	e := eventStatus(t, writer.Store, late)
	require.Equal(t, outbox.StatusNew, e.Status)
	require.Zero(t, e.Attempts)
	require.Equal(t, second.Owner(), e.LockedBy, "the second relay's lease holds")

	again.Ack()
	relaytest.Eventually(t, "the second relay's DONE", func() bool {
		return eventStatus(t, writer.Store, late).Status == outbox.StatusDone
	})
}

// A handler that does not answer: once the claim ran out, the same relay
// claims the event again and delivers it to another handler, as another
// relay would, instead of holding it lease after lease because its first
// delivery is still in flight.
func TestEventOfAHungHandlerIsDeliveredAgainAfterTheLease(t *testing.T) {
	t.Parallel()
	store := storeWithBacklog(t, testdb.New(t), 1)
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		LockTimeout: 2 * time.Second, PollInterval: 50 * time.Millisecond, WorkerCount: 2, DrainTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	msgs, err := sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)

	hung := nextMessage(t, msgs, "nothing delivered") // not answered in time
	again := nextMessage(t, msgs, "not delivered again after the lease")
	require.Equal(t, hung.Metadata.Get(watermilladapter.MetadataEventID), again.Metadata.Get(watermilladapter.MetadataEventID))

	// The first handler fails at last: a failed attempt, recorded, which
	// the second delivery's Ack then overrides.
	hung.Nack()
	relaytest.Eventually(t, "the late failure recorded", func() bool {
		e := eventStatus(t, store, again)
		return e.Status == outbox.StatusRetry && e.Attempts == 1
	})
	again.Ack()
	relaytest.Eventually(t, "DONE", func() bool { return eventStatus(t, store, again).Status == outbox.StatusDone })
}

// A reader that takes one message at a time (for msg := range out) keeps
// the other workers waiting to hand theirs over. An event whose claim ran
// half out meanwhile is left to the next claim rather than handed over
// late, when another relay may have claimed and delivered it already.
func TestEventWaitingForTheReaderIsLeftToTheNextClaim(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	const events = 16
	store := storeWithBacklog(t, pool, events)
	var mu sync.Mutex
	deliveries := make(map[string]int)
	var readers sync.WaitGroup
	t.Cleanup(readers.Wait)
	for range 2 {
		sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
			LockTimeout: 2 * time.Second, PollInterval: 50 * time.Millisecond, BatchSize: 4, ColdQueueCapacity: 4})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, sub.Close()) })
		msgs, err := sub.Subscribe(t.Context(), "orders")
		require.NoError(t, err)
		readers.Go(func() {
			for msg := range msgs {
				mu.Lock()
				deliveries[msg.Metadata.Get(watermilladapter.MetadataEventID)]++
				mu.Unlock()
				time.Sleep(300 * time.Millisecond) // well within the lease
				msg.Ack()
			}
		})
	}
	relaytest.Eventually(t, "every event DONE", func() bool {
		var done int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event WHERE status = 1`).Scan(&done))
		return done == events
	})
	time.Sleep(time.Second) // what still waits to be handed over
	mu.Lock()
	defer mu.Unlock()
	for id, n := range deliveries {
		require.Equal(t, 1, n, "deliveries of %s", id)
	}
}

// A hot event's claim begins when it is written, not when its transaction
// commits. A transaction that stays open past the claim commits an event
// any relay may claim at once: the hot path leaves it to them, instead of
// delivering it beside them.
func TestHotEventOfATransactionOpenPastItsClaimIsDeliveredOnce(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	const lease = 2 * time.Second
	var mu sync.Mutex
	deliveries := make(map[string][]string) // event id → sources
	var readers sync.WaitGroup
	t.Cleanup(readers.Wait)
	subs := make([]*watermilladapter.Subscriber, 2)
	for i, poll := range []time.Duration{time.Hour, 50 * time.Millisecond} { // the writer's relay, another
		sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{LockTimeout: lease, PollInterval: poll})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, sub.Close()) })
		msgs, err := sub.Subscribe(t.Context(), "orders")
		require.NoError(t, err)
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
		time.Sleep(lease + lease/4) // a slow call inside the transaction
		return nil
	}))
	relaytest.Eventually(t, "the event DONE", func() bool {
		var done int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event WHERE status = 1`).Scan(&done))
		return done == 1
	})
	time.Sleep(500 * time.Millisecond) // a second delivery, if any, reaches its reader
	mu.Lock()
	defer mu.Unlock()
	for id, sources := range deliveries {
		require.Equal(t, []string{watermilladapter.SourceCold}, sources, "deliveries of %s", id)
	}
}

// Close gives up on handlers after DrainTimeout by ending their messages'
// contexts, and handlers that honour them fail and Nack. Those events are
// released as they were, their attempts unspent: on its last attempt, an
// event would otherwise go DEAD for a shutdown.
func TestNacksOfAbandonedHandlersSpendNoAttempt(t *testing.T) {
	t.Parallel()
	const events = 16
	store := storeWithBacklog(t, testdb.New(t), events)
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		WorkerCount: events, DrainTimeout: 50 * time.Millisecond,
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
	require.NoError(t, sub.Close())
	for _, msg := range delivered {
		e := eventStatus(t, store, msg)
		require.Equal(t, outbox.StatusNew, e.Status, "event %s", e.ID)
		require.Zero(t, e.Attempts, "event %s", e.ID)
	}
}

// A worker's hand-over timer is left running between events. Under
// GODEBUG=asynctimerchan=1 a timer keeps the time it sent while nobody
// received it, for a later receive: the next hand-over that waits must not
// take that time for its own and leave its event to the next claim. The
// test runs itself again in a process with that setting.
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
	store := storeWithBacklog(t, pool, 1)
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		LockTimeout: 4 * time.Second, PollInterval: 50 * time.Millisecond, WorkerCount: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	msgs, err := sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond) // the worker waits to hand the event over
	nextMessage(t, msgs, "the first event").Ack()
	time.Sleep(2500 * time.Millisecond) // its timer fires at half the claim, unreceived
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{OwnTransaction: true})
	require.NoError(t, err)
	require.NoError(t, pub.Publish("orders", newMsg("second")))
	time.Sleep(300 * time.Millisecond) // the worker waits to hand it over
	select {
	case msg := <-msgs:
		msg.Ack()
	case <-time.After(2500 * time.Millisecond): // its claim's end, and a claim after it, are further off
		t.Fatal("the second event was left to the next claim")
	}
}

// Only a commit delivers on the hot path. A savepoint that a context
// carries (outbox.ContextWithTx, as a CQRS bus needs) can roll back while
// its transaction commits; an InTx on a transaction (a savepoint in it)
// commits nothing until that transaction does.
func TestHotPathDeliversOnlyWhatTheDatabaseCommitted(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	got := newReceived()
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{PollInterval: time.Hour},
		relaytest.Handlers{"orders": got.handler})
	publishIn := func(ctx context.Context, tx pgx.Tx, payload string) error {
		msg := newMsg(payload)
		msg.SetContext(outbox.ContextWithTx(ctx, tx))
		return r.Pub.Publish("orders", msg)
	}

	require.NoError(t, r.Store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		savepoint, err := tx.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, publishIn(ctx, savepoint, "rolled back to its savepoint"))
		return savepoint.Rollback(ctx)
	}))
	outer, err := pool.Begin(t.Context())
	require.NoError(t, err)
	require.NoError(t, postgres.InTx(t.Context(), outer, nil, func(ctx context.Context, tx pgx.Tx) error {
		return publishIn(ctx, tx, "in a transaction rolled back")
	}))
	require.NoError(t, outer.Rollback(t.Context()))
	// Written through a transaction while a savepoint opened on it is
	// open, an event lands in that savepoint, which can roll back on its
	// own: a Watermill publish whose context comes from InTx does this.
	publishWhileSavepointOpen := func(ctx context.Context, tx pgx.Tx, payload string, end func(savepoint pgx.Tx) error) error {
		savepoint, err := tx.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, publishIn(ctx, tx, payload))
		return end(savepoint)
	}
	rollBack := func(savepoint pgx.Tx) error { return savepoint.Rollback(t.Context()) }
	require.NoError(t, r.Store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		return publishWhileSavepointOpen(ctx, tx, "rolled back to a savepoint opened after InTx", rollBack)
	}))
	require.NoError(t, r.Store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		return postgres.InTx(ctx, tx, nil, func(ctx context.Context, savepoint pgx.Tx) error {
			return publishWhileSavepointOpen(ctx, savepoint, "rolled back to a savepoint in a savepoint", rollBack)
		})
	}))
	require.Zero(t, rowCount(t, pool))

	// Nested in an InTx that commits, the savepoint's events are delivered
	// after that commit.
	require.NoError(t, r.Store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		require.NoError(t, postgres.InTx(ctx, tx, nil, func(ctx context.Context, savepoint pgx.Tx) error {
			return publishIn(ctx, savepoint, "committed")
		}))
		select {
		case msg := <-got.ch:
			t.Fatalf("%q delivered before its transaction committed", msg.Payload)
		case <-time.After(100 * time.Millisecond):
		}
		return nil
	}))
	msg := got.next(t)
	require.Equal(t, "committed", string(msg.Payload), "the hot path is FIFO: nothing rolled back came first")
	require.Equal(t, watermilladapter.SourceHot, msg.Metadata.Get(watermilladapter.MetadataSource))

	// A savepoint that is released commits with its transaction, and so
	// do the events written in it, on the hot path.
	require.NoError(t, r.Store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		return publishWhileSavepointOpen(ctx, tx, "released", func(savepoint pgx.Tx) error { return savepoint.Commit(ctx) })
	}))
	msg = got.next(t)
	require.Equal(t, "released", string(msg.Payload))
	require.Equal(t, watermilladapter.SourceHot, msg.Metadata.Get(watermilladapter.MetadataSource))
}

// An event behind the claim cursor, here one written before a backlog and
// committed after the cursor passed it, is claimed when its wake-up comes,
// not at the next poll: a short claim after the cursor is followed at once
// by one from the earliest due event.
func TestWokenClaimFindsWhatTheCursorPassed(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{}) // another process: no hot path
	require.NoError(t, err)
	event := func(name string) outbox.Envelope {
		e := outbox.NewBytes("OrderCreated", []byte(name))
		e.Topic = "orders"
		return e
	}
	late, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = late.Rollback(context.Background()) }()
	_, err = writer.Write(t.Context(), late, event("late"))
	require.NoError(t, err)
	time.Sleep(2 * time.Millisecond) // due after "late"
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, event("b0"), event("b1"), event("b2"))
		return err
	}))

	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		BatchSize: 2, ColdQueueCapacity: 2, WorkerCount: 1, PollInterval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	msgs, err := sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	first := <-msgs // a full claim of b0 and b1: the cursor is at b1
	require.Equal(t, "b0", string(first.Payload))
	require.NoError(t, late.Commit(t.Context()))
	sub.Wake("orders")
	first.Ack()

	var rest []string
	for len(rest) < 3 {
		msg := nextMessage(t, msgs, "woken, but the event the cursor passed waits for the poll")
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
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		SkipRecent: 300 * time.Millisecond, PollInterval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	msgs, err := sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	other, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{}) // another process's
	require.NoError(t, err)
	msg := newMsg("announced")
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, _ pgx.Tx) error {
		msg.SetContext(ctx)
		return other.Publish("orders", msg)
	}))
	sub.Wake("orders") // as its notification would
	got := nextMessage(t, msgs, "the announced event waits for the poll")
	require.Equal(t, msg.UUID, got.UUID)
	got.Ack()
}

// hangingBacklog is a store whose backlog query hangs until its context
// ends, as on a database that stopped answering.
type hangingBacklog struct{ outbox.Store }

func (hangingBacklog) Backlog(ctx context.Context, _ string) (int64, time.Time, error) {
	<-ctx.Done()
	return 0, time.Time{}, ctx.Err()
}

// Close cancels the backlog query of the metrics, a read, instead of
// waiting for its 30-second timeout.
func TestCloseDoesNotWaitForTheBacklogQuery(t *testing.T) {
	t.Parallel()
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{})
	require.NoError(t, err)
	sub, err := watermilladapter.NewSubscriber(hangingBacklog{store}, watermilladapter.SubscriberConfig{})
	require.NoError(t, err)
	_, err = sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond) // the backlog query is hanging
	require.NoError(t, closeWithin(t, sub, 10*time.Second, "Close waited for the backlog query"))
}

// Slow handlers behind a full cold queue: the claims of the events at the
// back of the queue run out before a worker takes them. Another relay
// then claims and delivers them, and the first must not deliver them too:
// nothing crashed, so nothing may be delivered twice.
func TestEventWhoseClaimRanOutInTheQueueIsNotDeliveredAgain(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	const events = 30
	store := storeWithBacklog(t, pool, events)

	_, deliveries := startSlowRelays(t, store, watermilladapter.SubscriberConfig{BatchSize: 10, ColdQueueCapacity: 10})
	deliveries.requireOnceEach(t, pool, events)
}

// The same on the hot path: events committed faster than a slow handler
// takes them wait in the hot queue, where the claims they were written
// with run out; another relay's cold path then claims them while they
// still wait.
func TestHotEventWhoseClaimRanOutInTheQueueIsNotDeliveredAgain(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	const events = 30
	subs, deliveries := startSlowRelays(t, store, watermilladapter.SubscriberConfig{HotQueueCapacity: events})
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: subs[0], OwnTransaction: true})
	require.NoError(t, err)
	for i := range events {
		require.NoError(t, pub.Publish("orders", newMsg(fmt.Sprint(i))))
	}
	deliveries.requireOnceEach(t, pool, events)
}

// storeWithBacklog returns a store on pool whose table holds n events of
// "orders", committed in one transaction.
func storeWithBacklog(t *testing.T, pool *pgxpool.Pool, n int) *postgres.Store {
	t.Helper()
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{OwnTransaction: true})
	require.NoError(t, err)
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = newMsg(fmt.Sprint(i))
	}
	require.NoError(t, pub.Publish("orders", msgs...))
	return store
}

// deliveryCount counts deliveries by event id.
type deliveryCount struct {
	mu sync.Mutex
	n  map[string]int
}

// startSlowRelays starts two relays of "orders" configured by cfg, with a
// lease of 1 s, each handling one event at a time in 100 ms. An event
// handed to a handler has at least half the lease left, and its DONE is
// recorded within the handler's time and the settler's linger (50 ms), so
// a busy machine has 350 ms to spare before another relay could claim it
// again; events from the sixth in a queue on wait past half their lease.
func startSlowRelays(t *testing.T, store outbox.Store, cfg watermilladapter.SubscriberConfig) ([]*watermilladapter.Subscriber, *deliveryCount) {
	t.Helper()
	cfg.WorkerCount, cfg.LockTimeout, cfg.PollInterval = 1, time.Second, 50*time.Millisecond
	deliveries := &deliveryCount{n: map[string]int{}}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // after the subscribers' Close, which ends the handlers' loops
	subs := make([]*watermilladapter.Subscriber, 2)
	for i := range subs {
		cfg.Owner = fmt.Sprint("relay-", i)
		sub, err := watermilladapter.NewSubscriber(store, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, sub.Close()) })
		out, err := sub.Subscribe(t.Context(), "orders")
		require.NoError(t, err)
		subs[i] = sub
		wg.Go(func() {
			for msg := range out {
				deliveries.mu.Lock()
				deliveries.n[msg.Metadata.Get(watermilladapter.MetadataEventID)]++
				deliveries.mu.Unlock()
				time.Sleep(100 * time.Millisecond)
				msg.Ack()
			}
		})
	}
	return subs, deliveries
}

// requireOnceEach waits for the events of pool's outbox table to be DONE
// and fails the test unless each was delivered once.
func (d *deliveryCount) requireOnceEach(t *testing.T, pool *pgxpool.Pool, events int) {
	t.Helper()
	relaytest.Eventually(t, "every event DONE", func() bool {
		var done int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event WHERE status = 1`).Scan(&done))
		return done == events
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	require.Len(t, d.n, events)
	for id, n := range d.n {
		require.Equal(t, 1, n, "deliveries of %s", id)
	}
}

// replyLost is a store whose first RETRY batch commits on the server but
// reaches the relay as an error, as when the connection dies between the
// commit and its reply; the error comes once ready is closed.
type replyLost struct {
	*postgres.Store
	lost  atomic.Bool
	ready chan struct{}
}

func (s *replyLost) UpdateStatus(ctx context.Context, owner string, updates ...outbox.StatusUpdate) (int64, error) {
	n, err := s.Store.UpdateStatus(ctx, owner, updates...)
	if err == nil && len(updates) > 0 && updates[0].Status == outbox.StatusRetry && s.lost.CompareAndSwap(false, true) {
		<-s.ready
		return 0, errors.New("read tcp: connection reset by peer")
	}
	return n, err
}

// The relay sends a failed outcome statement again. When the first had
// committed (its reply lost) and the relay has claimed the event again
// since, the RETRY sent again must not count a second attempt for one
// Nack, nor end the new claim under the handler now holding the event,
// which would let another relay deliver it at the same time.
func TestRetrySentAgainAfterALostReplyCountsOnce(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	base := storeWithBacklog(t, pool, 1)
	store := &replyLost{Store: base, ready: make(chan struct{})}
	fast := outbox.Backoff{Base: 10 * time.Millisecond, Max: 10 * time.Millisecond, MaxAttempts: 100}
	newRelay := func(store outbox.Store, owner string) <-chan *message.Message {
		sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
			Owner: owner, PollInterval: 50 * time.Millisecond, RetryPolicy: fast})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close() })
		msgs, err := sub.Subscribe(t.Context(), "orders")
		require.NoError(t, err)
		return msgs
	}

	a := newRelay(store, "a")
	first := nextMessage(t, a, "first delivery")
	id := first.Metadata.Get(watermilladapter.MetadataEventID)
	first.Nack() // the RETRY commits; its reply waits for ready
	second := nextMessage(t, a, "the retry, claimed again by relay a")
	require.Equal(t, id, second.Metadata.Get(watermilladapter.MetadataEventID))
	b := newRelay(base, "b")
	close(store.ready) // the reply is lost; relay a sends the RETRY again

	for range 50 { // a second, while relay a's handler holds the event
		select {
		case msg := <-b:
			t.Fatalf("relay b got %s while relay a's handler holds it", msg.Metadata.Get(watermilladapter.MetadataEventID))
		case <-time.After(20 * time.Millisecond):
		}
		e := statusOf(t, base, id)
		require.Equal(t, 1, e.Attempts, "one Nack, one attempt")
		require.Equal(t, "a", e.LockedBy, "relay a's new claim holds")
	}
	second.Ack()
}

// Ordered: the events of each aggregate reach the handler one at a time
// and in write order, through retries, while different aggregates run in
// parallel. Nothing polls (PollInterval is an hour): commits and acks must
// wake the claims themselves.
func TestOrderedDeliveryKeepsEachAggregatesOrder(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	const aggregates, perAggregate = 5, 20
	var mu sync.Mutex
	inFlight := map[string]int{}
	got := map[string][]int{}
	tries := map[string]int{}
	var total, mostInFlight int
	var overlaps []string
	done := make(chan struct{})
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{Ordered: true, WorkerCount: 8, PollInterval: time.Hour},
		relaytest.Handlers{"orders": func(msg *message.Message) error {
			aggregate := msg.Metadata.Get(watermilladapter.MetadataAggregateID)
			mu.Lock()
			inFlight[aggregate]++
			total++
			mostInFlight = max(mostInFlight, total)
			if inFlight[aggregate] > 1 {
				overlaps = append(overlaps, aggregate)
			}
			tries[msg.UUID]++
			fail := tries[msg.UUID] == 1 && len(got[aggregate])%3 == 1
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			inFlight[aggregate]--
			total--
			if fail {
				return outbox.RetryAfter(time.Millisecond, errors.New("not yet"))
			}
			n, err := strconv.Atoi(string(msg.Payload))
			if err != nil {
				n = -1
			}
			got[aggregate] = append(got[aggregate], n)
			if len(got[aggregate]) == perAggregate && len(got) == aggregates && allOf(got, perAggregate) {
				close(done)
			}
			return nil
		}})
	for i := range perAggregate {
		for a := range aggregates {
			msg := newMsg(strconv.Itoa(i))
			msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
			msg.Metadata.Set(watermilladapter.MetadataAggregateID, strconv.Itoa(a))
			r.Publish(t, "orders", msg)
		}
	}
	select {
	case <-done:
	case <-time.After(relaytest.WaitLimit):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("delivered %v before the time limit", got)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, overlaps, "events of one aggregate in the handler at once")
	inOrder := make([]int, perAggregate)
	for i := range inOrder {
		inOrder[i] = i
	}
	for a, seq := range got {
		require.Equal(t, inOrder, seq, "aggregate %s", a)
	}
	require.Greater(t, mostInFlight, 1, "different aggregates are delivered in parallel")
}

// allOf reports whether every aggregate of got has n events.
func allOf(got map[string][]int, n int) bool {
	for _, seq := range got {
		if len(seq) != n {
			return false
		}
	}
	return true
}

// The next event of an ordered aggregate is claimed as soon as the DONE
// before it is recorded, not after WakeCooldown, which is there to merge
// other processes' commit announcements: here, a cooldown and a poll of
// an hour each.
func TestOrderedAggregateIsNotHeldByTheWakeCooldown(t *testing.T) {
	t.Parallel()
	store := committedSteps(t, "OrderCreated", 5)
	_, msgs := subscribeColdly(t, store)
	for i := range 5 {
		msg := nextMessage(t, msgs, fmt.Sprintf("event %d of the aggregate", i))
		require.JSONEq(t, fmt.Sprintf(`{"step": %d}`, i), string(msg.Payload))
		msg.Ack()
	}
}

// A DEAD ordered event holds back its aggregate: its log line says so,
// with the aggregate, so that an operator knows a replay or a purge is
// awaited. An unordered relay's does not.
func TestDeadOrderedEventSaysItHoldsBackItsAggregate(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprint("ordered=", ordered), func(t *testing.T) {
			t.Parallel()
			pool := testdb.New(t)
			logger := watermill.NewCaptureLogger()
			r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{Ordered: ordered, Logger: logger},
				relaytest.Handlers{"orders": func(*message.Message) error { return outbox.Permanent(errors.New("poison")) }})
			msg := newMsg("x")
			msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
			msg.Metadata.Set(watermilladapter.MetadataAggregateID, "o-9")
			r.Publish(t, "orders", msg)
			id := onlyEventID(t, pool)
			relaytest.Eventually(t, "DEAD", func() bool { return statusOf(t, r.Store, id).Status == outbox.StatusDead })
			var dead []watermill.CapturedMessage
			for _, m := range logger.Captured()[watermill.ErrorLogLevel] {
				if m.Msg == "outbox event is DEAD" {
					dead = append(dead, m)
				}
			}
			require.Len(t, dead, 1)
			if ordered {
				require.Equal(t, true, dead[0].Fields["holds_back_aggregate"])
				require.Equal(t, "o-9", dead[0].Fields["aggregate_id"])
			} else {
				require.NotContains(t, dead[0].Fields, "holds_back_aggregate")
			}
		})
	}
}

// An ordered relay that closes while a handler still holds the first
// event of an aggregate (a rolling deploy, a handler slower than
// DrainTimeout) must not let the aggregate go on: Close gives up on the
// handler, but the handler may still be forwarding the event. Another
// relay must not deliver the next event of that aggregate while the first
// is in a handler and its lease (an hour here) has not run out.
func TestOrderedCloseDoesNotLetTheAggregateOvertakeAHandlerItGaveUpOn(t *testing.T) {
	t.Parallel()
	store := committedSteps(t, "orders", 2)

	subscribe := func(owner string, drain time.Duration) (*watermilladapter.Subscriber, <-chan *message.Message) {
		sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{Owner: owner, Ordered: true,
			LockTimeout: time.Hour, PollInterval: 20 * time.Millisecond, DrainTimeout: drain})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close() })
		msgs, err := sub.Subscribe(t.Context(), "orders")
		require.NoError(t, err)
		return sub, msgs
	}
	first, firstMsgs := subscribe("first", 50*time.Millisecond)
	held := nextMessage(t, firstMsgs, "the first relay delivered nothing")
	require.JSONEq(t, `{"step": 0}`, string(held.Payload))
	// The handler goes on with held past DrainTimeout: Close gives up on it.
	require.NoError(t, closeWithin(t, first, relaytest.WaitLimit, "Close did not end"))

	_, msgs := subscribe("second", time.Second)
	deadline := time.After(2 * time.Second)
	for {
		select {
		case msg := <-msgs:
			if string(msg.Payload) != `{"step": 0}` {
				t.Fatalf("the second relay delivered %s while the first relay's handler still held step 0 under a claim of an hour", msg.Payload)
			}
			msg.Ack() // a redelivery of step 0: at least once allows it
		case <-deadline:
			held.Ack()
			return
		}
	}
}

// The next event of an ordered aggregate is claimed as soon as the DONE
// before it is recorded, even when a commit announced meanwhile (here a
// Wake, as the Publisher and a Listener send) put the claim loop into the
// cooldown's wait, here an hour.
func TestOrderedAggregateIsNotHeldByTheCooldownOfAnotherCommit(t *testing.T) {
	t.Parallel()
	store := committedSteps(t, "OrderCreated", 2)
	sub, msgs := subscribeColdly(t, store)

	first := nextMessage(t, msgs, "event 0 of the aggregate")
	require.JSONEq(t, `{"step": 0}`, string(first.Payload))
	sub.Wake("OrderCreated")          // another aggregate's commit, announced
	time.Sleep(50 * time.Millisecond) // room for the claim loop to take the wake-up
	first.Ack()
	second := nextMessage(t, msgs, "event 1 waited for the cooldown of a wake-up that came while event 0 was in its handler")
	require.JSONEq(t, `{"step": 1}`, string(second.Payload))
	second.Ack()
}

// Ordered claims take the aggregates in turn through a backlog: the relay
// does not send them back to the first aggregate every second, as it
// sends unordered claims back to the earliest due event, which would
// serve the first aggregates again and again while the last ones wait.
// Here 1,000 aggregates of 4 events each, a relay that delivers a few
// hundred events a second. The next event of an aggregate whose event is
// DONE is claimed by name, taking turns with the walk that finds the first
// events of the others, so the last aggregate has its first event within
// about 2,000 of the 4,000 (1,000 if the walk had every claim, all but the
// last 3 if the first aggregates were served again and again): it must
// within 2,500.
func TestOrderedAggregatesTakeTurnsThroughABacklog(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	const aggregates, perAggregate = 1000, 4
	var events []outbox.Envelope
	for i := range perAggregate {
		for a := range aggregates {
			e := outbox.NewJSON("OrderCreated", fmt.Appendf(nil, `{"step": %d}`, i))
			e.Topic, e.AggregateType, e.AggregateID = "orders", "Order", fmt.Sprintf("a%03d", a)
			events = append(events, e)
		}
	}
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, events...)
		return err
	}))
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{Ordered: true,
		WorkerCount: 1, ColdQueueCapacity: 10, BatchSize: 10, PollInterval: time.Hour})
	require.NoError(t, err)
	defer func() { require.NoError(t, sub.Close()) }()
	msgs, err := sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)

	last := fmt.Sprintf("a%03d", aggregates-1)
	timeout := time.After(2 * relaytest.WaitLimit)
	const within = 2500
	for delivered := range within {
		select {
		case msg := <-msgs:
			time.Sleep(time.Millisecond) // the handler's work
			msg.Ack()
			if msg.Metadata.Get(watermilladapter.MetadataAggregateID) == last {
				t.Logf("%s had its first event as event %d", last, delivered+1)
				return
			}
		case <-timeout:
			t.Fatalf("%s had no event in time", last)
		}
	}
	t.Fatalf("%s had no event among the first %d", last, within)
}

// committedSteps commits, in one transaction on a fresh database, n events
// of the aggregate Order o-1 on topic, with the payloads {"step": 0} to
// {"step": n-1}, and returns the store.
func committedSteps(t *testing.T, topic string, n int) *postgres.Store {
	t.Helper()
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	events := make([]outbox.Envelope, n)
	for i := range events {
		events[i] = outbox.NewJSON("OrderCreated", fmt.Appendf(nil, `{"step": %d}`, i))
		events[i].Topic, events[i].AggregateType, events[i].AggregateID = topic, "Order", "o-1"
	}
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, events...)
		return err
	}))
	return store
}

// subscribeColdly subscribes an ordered relay to topic OrderCreated of
// store whose wake-ups wait out a cooldown of an hour and which polls once
// an hour: what it claims sooner, something asked for at once. It is
// closed at the end of the test.
func subscribeColdly(t *testing.T, store *postgres.Store) (*watermilladapter.Subscriber, <-chan *message.Message) {
	t.Helper()
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		Ordered: true, WakeCooldown: time.Hour, PollInterval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	msgs, err := sub.Subscribe(t.Context(), "OrderCreated")
	require.NoError(t, err)
	return sub, msgs
}

// claimRecorder is a store that keeps the claim requests made on it.
type claimRecorder struct {
	outbox.Store
	mu       sync.Mutex
	requests []outbox.ClaimRequest
}

func (c *claimRecorder) Claim(ctx context.Context, req outbox.ClaimRequest) ([]outbox.Event, error) {
	c.mu.Lock()
	c.requests = append(c.requests, req)
	c.mu.Unlock()
	return c.Store.Claim(ctx, req)
}

// walksAndNamed counts the claims that walked the topic and those that
// named aggregates, and returns the aggregates named.
func (c *claimRecorder) walksAndNamed() (walks, named int, aggregates []outbox.Aggregate) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, req := range c.requests {
		if len(req.Aggregates) == 0 {
			walks++
			continue
		}
		named++
		aggregates = append(aggregates, req.Aggregates...)
	}
	return walks, named, aggregates
}

// writeUnannounced commits e with a writer that tells no relay: only a
// walk finds it.
func writeUnannounced(t *testing.T, store *postgres.Store, e outbox.Envelope) {
	t.Helper()
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, e)
		return err
	}))
}

// subscribeRecorded subscribes an ordered relay of cfg on store to topic,
// its claims recorded; the relay is closed at the end of the test.
func subscribeRecorded(t *testing.T, store outbox.Store, cfg watermilladapter.SubscriberConfig, topic string) (*claimRecorder, *watermilladapter.Subscriber, <-chan *message.Message) {
	t.Helper()
	recorder := &claimRecorder{Store: store}
	cfg.Ordered = true
	sub, err := watermilladapter.NewSubscriber(recorder, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	msgs, err := sub.Subscribe(t.Context(), topic)
	require.NoError(t, err)
	return recorder, sub, msgs
}

// requireOneWalk checks that only the first claim walked the topic and
// that at least minNamed claims named aggregates, all of them in want.
func (c *claimRecorder) requireOneWalk(t *testing.T, minNamed int, want ...outbox.Aggregate) {
	t.Helper()
	walks, named, aggregates := c.walksAndNamed()
	require.Equal(t, 1, walks, "only the first claim walks the topic")
	require.GreaterOrEqual(t, named, minNamed, "claims by the aggregates' names")
	require.Subset(t, want, aggregates, "the aggregates named")
}

// Once the DONE of an ordered event is recorded, the claim of the next
// event of its aggregate names that aggregate instead of walking every
// aggregate of the topic: aggregates held back by a first event due
// tomorrow cost the one that moves nothing.
func TestOrderedDoneClaimsTheNextEventOfItsAggregateByName(t *testing.T) {
	t.Parallel()
	store := committedSteps(t, "OrderCreated", 5)
	heldBack := outbox.NewJSON("OrderCreated", []byte(`{}`))
	heldBack.AggregateType, heldBack.AggregateID, heldBack.DeliverAfter = "Order", "o-2", time.Now().Add(24*time.Hour)
	writeUnannounced(t, store, heldBack)
	recorder, _, msgs := subscribeRecorded(t, store, watermilladapter.SubscriberConfig{
		WakeCooldown: time.Hour, PollInterval: time.Hour}, "OrderCreated")
	for i := range 5 {
		msg := nextMessage(t, msgs, fmt.Sprintf("event %d of the aggregate", i))
		require.JSONEq(t, fmt.Sprintf(`{"step": %d}`, i), string(msg.Payload))
		msg.Ack()
	}
	recorder.requireOneWalk(t, 4, outbox.Aggregate{Topic: "OrderCreated", Type: "Order", ID: "o-1"})
}

// Claims brought by DONEs alone do not keep the relay from walking the
// topic: an event that nothing announced (written by a process with no
// relay, not notified) is claimed by a walk at the poll interval, however
// busy one aggregate keeps the relay meanwhile.
func TestOrderedRelayStillWalksAtThePollIntervalWhileAnAggregateMoves(t *testing.T) {
	t.Parallel()
	const steps = 400
	store := committedSteps(t, "OrderCreated", steps)
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		Ordered: true, WakeCooldown: time.Hour, PollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	msgs, err := sub.Subscribe(t.Context(), "OrderCreated")
	require.NoError(t, err)
	first := nextMessage(t, msgs, "the first event of the aggregate that moves")
	other := outbox.NewJSON("OrderCreated", []byte(`{"other": true}`))
	other.AggregateType, other.AggregateID = "Order", "o-2"
	writeUnannounced(t, store, other)
	first.Ack()
	for step := 1; step < steps; step++ {
		msg := nextMessage(t, msgs, "the next event")
		if msg.Metadata.Get(watermilladapter.MetadataAggregateID) == "o-2" {
			msg.Ack()
			return
		}
		time.Sleep(5 * time.Millisecond) // a handler's work: DONEs keep coming for two seconds
		msg.Ack()
	}
	t.Fatalf("the event of another aggregate waited for all %d events of the one that moved", steps)
}

// The commits of this process wake an ordered relay with their
// aggregates, which its claims name instead of walking the topic: the
// aggregates of other processes, held back or not, cost them nothing.
func TestOrderedCommitsOfThisProcessAreClaimedByName(t *testing.T) {
	t.Parallel()
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{})
	require.NoError(t, err)
	recorder, sub, msgs := subscribeRecorded(t, store, watermilladapter.SubscriberConfig{
		WakeCooldown: time.Millisecond, PollInterval: time.Hour}, "orders")
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: sub})
	require.NoError(t, err)
	relaytest.Eventually(t, "the first claim", func() bool { walks, _, _ := recorder.walksAndNamed(); return walks == 1 })

	var want []outbox.Aggregate
	for i := range 3 {
		msg := newMsg(fmt.Sprint(i))
		msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
		msg.Metadata.Set(watermilladapter.MetadataAggregateID, fmt.Sprint("o-", i))
		require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			msg.SetContext(ctx)
			return pub.Publish("orders", msg)
		}))
		want = append(want, outbox.Aggregate{Topic: "orders", Type: "Order", ID: fmt.Sprint("o-", i)})
		nextMessage(t, msgs, fmt.Sprint("event ", i)).Ack()
	}
	recorder.requireOneWalk(t, len(want), want...)
	_, _, named := recorder.walksAndNamed()
	require.Subset(t, named, want, "each commit's aggregate is named")
}

// An ordered event's retry is claimed when it is due by its aggregate's
// name, not by a walk: during an outage, retries coming due one after
// another each cost a look-up, whatever number of aggregates they hold
// back.
func TestOrderedRetryIsClaimedByName(t *testing.T) {
	t.Parallel()
	store := committedSteps(t, "OrderCreated", 2)
	recorder, _, msgs := subscribeRecorded(t, store, watermilladapter.SubscriberConfig{WakeCooldown: time.Millisecond,
		PollInterval: time.Hour, RetryPolicy: outbox.Backoff{Base: 50 * time.Millisecond, NoJitter: true}}, "OrderCreated")
	first := nextMessage(t, msgs, "the first event")
	first.Nack()
	again := nextMessage(t, msgs, "the first event, retried")
	require.Equal(t, first.UUID, again.UUID)
	again.Ack()
	nextMessage(t, msgs, "the second event").Ack()
	recorder.requireOneWalk(t, 2, outbox.Aggregate{Topic: "OrderCreated", Type: "Order", ID: "o-1"})
}

// Named claims do not put the walk off: it comes PollInterval after the
// last walk, however recently a DONE brought a named claim. Here the
// first event's DONE, three quarters into the poll interval, brings one,
// and an event nothing announced must come with the walk due at the end
// of the interval, not a whole interval after that named claim.
func TestOrderedWalkComesAPollIntervalAfterTheLastWalk(t *testing.T) {
	t.Parallel()
	const poll = 2 * time.Second
	store := committedSteps(t, "OrderCreated", 2)
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		Ordered: true, WakeCooldown: time.Hour, PollInterval: poll})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	start := time.Now()
	msgs, err := sub.Subscribe(t.Context(), "OrderCreated")
	require.NoError(t, err)
	first := nextMessage(t, msgs, "the first event, claimed by the first walk")
	other := outbox.NewJSON("OrderCreated", []byte(`{"other": true}`))
	other.AggregateType, other.AggregateID = "Order", "o-2"
	writeUnannounced(t, store, other)
	time.Sleep(time.Until(start.Add(poll * 3 / 4)))
	first.Ack()
	for {
		msg := nextMessage(t, msgs, "the next event")
		msg.Ack()
		if msg.Metadata.Get(watermilladapter.MetadataAggregateID) == "o-2" {
			// A whole interval after the named claim would be 3.5 s.
			require.Less(t, time.Since(start), poll+700*time.Millisecond, "the walk waited for a poll interval after the named claim")
			return
		}
	}
}
