package designs_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/wmoutbox/wmoutbox/internal/testdb"
	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/outboxtest"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// What every design's test shares: a relay as a service runs it, on
// PostgreSQL and a clock the test moves, and a broker that can be down.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitLimit bounds every wait on the relay, in real time.
const waitLimit = 10 * time.Second

// relay is one service's outbox: a store on its own database, the
// Subscriber with the design's settings, a Writer whose hot path it is,
// and a Watermill router running the design's handlers behind
// outboxmw.RecordErrors, all on one clock.
type relay struct {
	clock  *outboxtest.Clock
	pool   *pgxpool.Pool
	store  *postgres.Store
	sub    *watermilladapter.Subscriber
	writer *outbox.Writer[pgx.Tx]
}

// startRelay starts a relay on a database of its own and clock,
// configured by cfg (its Clock and, when unset, its Logger are the
// test's), running handlers by topic behind RecordErrors and mw.
// Everything is closed at the test's cleanup.
func startRelay(t *testing.T, clock *outboxtest.Clock, cfg watermilladapter.SubscriberConfig,
	handlers map[string]message.NoPublishHandlerFunc, mw ...message.HandlerMiddleware) *relay {
	t.Helper()
	return startRelayOn(t, testdb.New(t), clock, cfg, handlers, mw...)
}

// startRelayOn is startRelay on the database of pool, which the relay
// does not close: one of several relays of a service.
func startRelayOn(t *testing.T, pool *pgxpool.Pool, clock *outboxtest.Clock, cfg watermilladapter.SubscriberConfig,
	handlers map[string]message.NoPublishHandlerFunc, mw ...message.HandlerMiddleware) *relay {
	t.Helper()
	store, err := postgres.NewStore(pool, postgres.Config{Clock: clock})
	require.NoError(t, err)
	cfg.Clock = clock
	if cfg.Logger == nil {
		// DEAD events are logged at error level: expected here.
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	sub, err := watermilladapter.NewSubscriber(store, cfg)
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{HotPath: sub})
	require.NoError(t, err)
	r := &relay{clock: clock, pool: pool, store: store, sub: sub, writer: writer}

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(append([]message.HandlerMiddleware{outboxmw.RecordErrors}, mw...)...)
	for topic, h := range handlers {
		router.AddConsumerHandler(topic+"-handler", topic, sub, h)
	}
	done := make(chan error, 1)
	go func() { done <- router.Run(context.Background()) }()
	t.Cleanup(func() {
		// What Close waits for runs on the clock.
		defer moveClock(clock)()
		require.NoError(t, router.Close())
		require.NoError(t, <-done)
		require.NoError(t, sub.Close())
	})
	select {
	case <-router.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	}
	return r
}

// write writes events in one store.InTx transaction, as business code
// does, and returns their ids: the hot path delivers them after the
// commit.
func (r *relay) write(t *testing.T, events ...outbox.Envelope) []string {
	t.Helper()
	return writeWith(t, r.store, r.writer, events)
}

// writeCold writes events with a writer that has no hot path, as another
// process would: the relay's claims deliver them.
func (r *relay) writeCold(t *testing.T, events ...outbox.Envelope) []string {
	t.Helper()
	w, err := outbox.NewWriter(r.store, outbox.WriterConfig{})
	require.NoError(t, err)
	return writeWith(t, r.store, w, events)
}

func writeWith(t *testing.T, store *postgres.Store, w *outbox.Writer[pgx.Tx], events []outbox.Envelope) []string {
	t.Helper()
	var ids []string
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		var err error
		ids, err = w.Write(ctx, tx, events...)
		return err
	}))
	return ids
}

// jsonEvent is an event of topic about the aggregate aggregateType/id,
// with payload encoded as JSON.
func jsonEvent(t *testing.T, eventType outbox.EventType, topic string, aggregateType outbox.AggregateType, id string, payload any) outbox.Envelope {
	t.Helper()
	e, err := outbox.MarshalJSON(eventType, payload)
	require.NoError(t, err)
	e.Topic, e.AggregateType, e.AggregateID = topic, aggregateType, id
	return e
}

// drain waits until every event due by the clock has its outcome
// recorded.
//
// On a clock that stands still, the claim a wake-up brings within
// WakeCooldown of the claim before it waits for the clock to move
// (Subscriber.WaitIdle says so), and under load a claim the last move of
// the clock started can run late, at the clock's time: when the relay is
// not idle within a second, the clock moves past the cooldown and the
// drain waits again.
func (r *relay) drain(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := r.sub.WaitIdle(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay not drained within %s: %v", waitLimit, err)
		}
		r.clock.Advance(watermilladapter.DefaultWakeCooldown)
	}
}

// moveClock moves clock on a millisecond at a time, no faster than real
// time, until the function it returns is called.
func moveClock(clock *outboxtest.Clock) (stop func()) {
	done := make(chan struct{})
	moved := make(chan struct{})
	go func() {
		defer close(moved)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				clock.Advance(time.Millisecond)
			}
		}
	}()
	return func() { close(done); <-moved }
}

func (r *relay) get(t *testing.T, id string) outbox.Event {
	t.Helper()
	e, err := r.store.Get(t.Context(), id)
	require.NoError(t, err)
	return e
}

// ids runs an operator's query, as written, and returns the event_id
// column of its rows in their order.
func (r *relay) ids(t *testing.T, query string, args ...any) []string {
	t.Helper()
	rows, err := r.pool.Query(t.Context(), query, args...)
	require.NoError(t, err, query)
	got, err := pgx.CollectRows(rows, pgx.RowToMap)
	require.NoError(t, err, query)
	ids := make([]string, 0, len(got))
	for _, row := range got {
		ids = append(ids, row["event_id"].(string))
	}
	return ids
}

// count runs an operator's query that returns one number.
func (r *relay) count(t *testing.T, query string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, r.pool.QueryRow(t.Context(), query, args...).Scan(&n), query)
	return n
}

// requireSchedule follows event id, which fails on every delivery, from
// its first delivery (just made) through a retry after each of waits to
// the failure that makes it DEAD, moving the clock by each wait in one
// step. deliveries returns the clock's time at each delivery so far. It
// checks each RETRY row (attempts, last_error, available_at the wait after
// the failure) and the time of each delivery, and returns the DEAD event.
func (r *relay) requireSchedule(t *testing.T, id string, waits []time.Duration, deliveries func() []time.Time, lastError string) outbox.Event {
	t.Helper()
	for i, wait := range waits {
		r.drain(t)
		failedAt := r.clock.Now()
		require.Len(t, deliveries(), i+1, "deliveries before retry %d", i+1)
		require.Equal(t, failedAt, deliveries()[i], "delivery %d", i+1)
		e := r.get(t, id)
		require.Equal(t, outbox.StatusRetry, e.Status, "after failure %d", i+1)
		require.Equal(t, i+1, e.Attempts, "after failure %d", i+1)
		require.Contains(t, e.LastError, lastError)
		require.Equal(t, wait, e.AvailableAt.Sub(failedAt), "wait after failure %d", i+1)
		// A step of the clock that a claim must wait out (the wake
		// cooldown after a claim) would stall the relay on a clock that
		// stands still: one step to the due time, no closer look.
		r.clock.Advance(wait)
	}
	r.drain(t)
	require.Len(t, deliveries(), len(waits)+1, "deliveries")
	e := r.get(t, id)
	require.Equal(t, outbox.StatusDead, e.Status)
	require.Equal(t, len(waits)+1, e.Attempts)
	require.Contains(t, e.LastError, lastError)
	return e
}

// untilDead moves the clock by step until event id, which fails on every
// delivery, is DEAD, and returns it.
func (r *relay) untilDead(t *testing.T, id string, step time.Duration) outbox.Event {
	t.Helper()
	for range 100 {
		r.drain(t)
		if e := r.get(t, id); e.Status == outbox.StatusDead {
			return e
		}
		r.clock.Advance(step)
	}
	t.Fatalf("event %s not DEAD after 100 steps of %s", id, step)
	return outbox.Event{}
}

// claimTracer records the relay's claims: the most each could take, and
// how many it took.
type claimTracer struct {
	mu     sync.Mutex
	limits []int
	rows   []int
}

func (c *claimTracer) StartStatement(ctx context.Context, st watermilladapter.Statement) (context.Context, func(int, error)) {
	if st.Operation != watermilladapter.OperationClaim {
		return ctx, func(int, error) {}
	}
	return ctx, func(rows int, err error) {
		if err != nil {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.limits = append(c.limits, st.Events)
		c.rows = append(c.rows, rows)
	}
}

func (c *claimTracer) claims() (limits, rows []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.limits...), append([]int(nil), c.rows...)
}

// errBrokerDown is what a broker that is down answers.
var errBrokerDown = errors.New("kafka: broker not available")

// broker stands in for the Kafka or RabbitMQ publisher a design forwards
// to: it keeps what it is sent, or refuses it while down, and records the
// clock's time of every publish.
type broker struct {
	clock *outboxtest.Clock

	mu       sync.Mutex
	down     bool
	attempts []time.Time
	got      []*message.Message
}

func newBroker(clock *outboxtest.Clock, down bool) *broker {
	return &broker{clock: clock, down: down}
}

func (b *broker) Publish(_ string, msgs ...*message.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.attempts = append(b.attempts, b.clock.Now())
	if b.down {
		return errBrokerDown
	}
	b.got = append(b.got, msgs...)
	return nil
}

func (b *broker) Close() error { return nil }

func (b *broker) setDown(down bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.down = down
}

// publishes returns the times of the publishes so far.
func (b *broker) publishes() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Time(nil), b.attempts...)
}

// received returns the messages the broker took.
func (b *broker) received() []*message.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*message.Message(nil), b.got...)
}
