package watermilladapter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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

// The relay's tests on PostgreSQL, one file per concern. Where time
// matters, the store and the subscriber share a clocktest.Clock that the
// test moves to the relay's next wait, instead of waiting for it.

// testStart is when the tests' clocks start: now, so that the times the
// store writes are near the database's own, to the microsecond, as
// clocktest.New keeps it.
var testStart = time.Now().Truncate(time.Microsecond)

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

// noMessage fails the test if msgs has a message waiting.
func noMessage(t *testing.T, msgs <-chan *message.Message, why string) {
	t.Helper()
	select {
	case m := <-msgs:
		t.Fatalf("%s: %s (event %s)", why, m.Payload, m.Metadata.Get(watermilladapter.MetadataEventID))
	default:
	}
}

func eventStatus(t *testing.T, store *postgres.Store, msg *message.Message) outbox.Event {
	t.Helper()
	return statusOf(t, store, msg.Metadata.Get(watermilladapter.MetadataEventID))
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

// doneCount is how many rows of the outbox table are DONE.
func doneCount(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event WHERE status = 1`).Scan(&n))
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

// storeWithBacklog returns a store on pool, with clock (nil: the system
// clock), whose table holds n events of "orders", committed in one
// transaction with no hot path.
func storeWithBacklog(t *testing.T, pool *pgxpool.Pool, clock outbox.Clock, n int) *postgres.Store {
	t.Helper()
	store, err := postgres.NewStore(pool, postgres.Config{Clock: clock})
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

// writeCold commits events with a writer that has no hot path and tells
// no relay, as another process's would: only a claim finds them.
func writeCold(t *testing.T, store *postgres.Store, events ...outbox.Envelope) []string {
	t.Helper()
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	var ids []string
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		ids, err = writer.Write(ctx, tx, events...)
		return err
	}))
	return ids
}

// orderEvent is an event of topic "orders" with payload.
func orderEvent(payload string) outbox.Envelope {
	e := outbox.NewBytes("OrderCreated", []byte(payload))
	e.Topic = "orders"
	return e
}

// subscribe subscribes to topic with a subscriber of cfg on store, closed
// at cleanup (on cfg's clock if it is a test clock, which then moves on).
func subscribe(t *testing.T, store *postgres.Store, cfg watermilladapter.SubscriberConfig, topic string) (*watermilladapter.Subscriber, <-chan *message.Message) {
	t.Helper()
	sub, err := watermilladapter.NewSubscriber(store, cfg)
	require.NoError(t, err)
	clock, _ := cfg.Clock.(*clocktest.Clock)
	t.Cleanup(func() { _ = relaytest.Close(t, sub, clock) })
	msgs, err := sub.Subscribe(t.Context(), topic)
	require.NoError(t, err)
	return sub, msgs
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

// storeOn returns a store on driver, with clock (nil: the system clock):
// how a test puts a driver of its own between the relay and PostgreSQL.
func storeOn(t testing.TB, driver outboxdriver.Driver[pgx.Tx], clock outbox.Clock) *postgres.Store {
	t.Helper()
	store, err := outbox.NewStore(driver, outbox.StoreConfig{Clock: clock})
	require.NoError(t, err)
	return store
}

// claimCounter is a driver that counts the claims made through it.
type claimCounter struct {
	outboxdriver.Driver[pgx.Tx]
	claims, ended atomic.Int64 // started and ended
}

func (c *claimCounter) Claim(ctx context.Context, p *outboxdriver.ClaimParams) ([]outboxdriver.Row, error) {
	c.claims.Add(1)
	defer c.ended.Add(1)
	return c.Driver.Claim(ctx, p)
}

// claimRecorder is a driver that keeps the claims made through it and
// what they returned.
type claimRecorder struct {
	outboxdriver.Driver[pgx.Tx]
	mu     sync.Mutex
	claims []recordedClaim
}

type recordedClaim struct {
	params outboxdriver.ClaimParams
	rows   []outboxdriver.Row
}

func (c *claimRecorder) Claim(ctx context.Context, p *outboxdriver.ClaimParams) ([]outboxdriver.Row, error) {
	rows, err := c.Driver.Claim(ctx, p)
	c.mu.Lock()
	c.claims = append(c.claims, recordedClaim{params: *p, rows: rows})
	c.mu.Unlock()
	return rows, err
}

// recorded returns the claims made so far.
func (c *claimRecorder) recorded() []recordedClaim {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]recordedClaim(nil), c.claims...)
}

// advanceUntilDone moves clock by the settler's linger until n events of
// pool's table are DONE (with a nil clock, it waits for them).
func advanceUntilDone(t *testing.T, clock *clocktest.Clock, pool *pgxpool.Pool, n int) {
	t.Helper()
	relaytest.AdvanceUntil(t, clock, watermilladapter.SettleLinger, fmt.Sprintf("%d events DONE", n),
		func() bool { return doneCount(t, pool) == n })
}

// nextMessageOnClock returns the next message of msgs, moving clock by
// step while it waits, and fails the test with why after WaitLimit.
func nextMessageOnClock(t *testing.T, clock *clocktest.Clock, step time.Duration, msgs <-chan *message.Message, why string) *message.Message {
	t.Helper()
	var msg *message.Message
	relaytest.AdvanceUntil(t, clock, step, why, func() bool {
		select {
		case msg = <-msgs:
			return true
		default:
			return false
		}
	})
	return msg
}
