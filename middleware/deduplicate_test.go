package middleware_test

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
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// charging is a consumer that writes a charge per event it handles, in
// the transaction Deduplicate gives it, and counts its runs.
type charging struct {
	pool *pgxpool.Pool
	runs atomic.Int64
	fail atomic.Bool // the next run fails after writing
	gate chan struct{}
}

// newCharging returns a consumer on a database of its own, and the store
// whose inbox records what it processed.
func newCharging(t *testing.T) (*charging, *postgres.Store) {
	pool := testdb.New(t)
	_, err := pool.Exec(t.Context(), `CREATE TABLE charges (event_id text NOT NULL)`)
	require.NoError(t, err)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	return &charging{pool: pool}, store
}

func (c *charging) handle(msg *message.Message) ([]*message.Message, error) {
	c.runs.Add(1)
	tx, ok := outbox.TxFromContext[pgx.Tx](msg.Context())
	if !ok {
		return nil, errors.New("no transaction in the message's context")
	}
	if _, err := tx.Exec(msg.Context(), `INSERT INTO charges (event_id) VALUES ($1)`, msg.Metadata.Get(watermilladapter.MetadataEventID)); err != nil {
		return nil, err
	}
	if c.gate != nil {
		<-c.gate
	}
	if c.fail.CompareAndSwap(true, false) {
		return nil, errors.New("card declined")
	}
	return nil, nil
}

func (c *charging) charges(t *testing.T) int {
	var n int
	require.NoError(t, c.pool.QueryRow(t.Context(), `SELECT count(*) FROM charges`).Scan(&n))
	return n
}

func eventMessage(id string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	msg.Metadata.Set(watermilladapter.MetadataEventID, id)
	return msg
}

func deduplicated(t *testing.T, store *postgres.Store, consumer string, h message.HandlerFunc) message.HandlerFunc {
	mw, err := outboxmw.Deduplicate(store, outboxmw.DeduplicateConfig{Consumer: consumer})
	require.NoError(t, err)
	return mw(h)
}

// Each event's effects happen once per consumer however often it comes:
// a delivery whose handler failed leaves nothing, not even its record.
func TestDeduplicateRunsTheHandlerOncePerEvent(t *testing.T) {
	t.Parallel()
	c, store := newCharging(t)
	handle := deduplicated(t, store, "billing", c.handle)

	msg := eventMessage("event-1")
	delivered := msg.Context()
	for range 3 {
		_, err := handle(msg)
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, c.runs.Load())
	require.Equal(t, 1, c.charges(t))
	require.Equal(t, delivered, msg.Context(), "the message's own context again after the handler")

	_, err := deduplicated(t, store, "audit", c.handle)(eventMessage("event-1"))
	require.NoError(t, err)
	require.Equal(t, 2, c.charges(t), "another consumer processes it too")

	c.fail.Store(true)
	_, err = handle(eventMessage("event-2"))
	require.ErrorContains(t, err, "card declined")
	require.Equal(t, 2, c.charges(t), "the failed run's write rolled back")
	_, err = handle(eventMessage("event-2"))
	require.NoError(t, err)
	require.Equal(t, 3, c.charges(t), "delivered again, processed")

	byUUID := message.NewMessage("uuid-1", []byte(`{}`)) // no event id: deduplicated by UUID
	for range 2 {
		_, err = handle(byUUID)
		require.NoError(t, err)
	}
	require.Equal(t, 4, c.charges(t))

	_, err = handle(message.NewMessage("", []byte(`{}`)))
	require.True(t, outbox.IsPermanent(err), "nothing to deduplicate by: %v", err)
}

// Two deliveries of one event at once: the second waits for the first's
// transaction and, once it commits, is skipped.
func TestDeduplicateSkipsAConcurrentDuplicate(t *testing.T) {
	t.Parallel()
	c, store := newCharging(t)
	c.gate = make(chan struct{})
	handle := deduplicated(t, store, "billing", c.handle)

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() { _, errs[i] = handle(eventMessage("event-1")) })
	}
	require.Eventually(t, func() bool { return c.runs.Load() == 1 }, 10*time.Second, time.Millisecond)
	time.Sleep(100 * time.Millisecond) // the other delivery waits on the record meanwhile
	close(c.gate)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.EqualValues(t, 1, c.runs.Load())
	require.Equal(t, 1, c.charges(t))
}

func TestDeduplicateRefusesABadConfig(t *testing.T) {
	t.Parallel()
	_, err := outboxmw.Deduplicate[pgx.Tx](nil, outboxmw.DeduplicateConfig{Consumer: "billing"})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{})
	require.NoError(t, err)
	_, err = outboxmw.Deduplicate(store, outboxmw.DeduplicateConfig{Consumer: "billing\x00"})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
}

// A handler that returns messages fails for good, and its writes and the
// record roll back: the router would publish them after the commit, and a
// failed publish would leave the event recorded with its messages never
// sent. An invalid request of the handler's own stays its own error.
func TestDeduplicateRefusesReturnedMessages(t *testing.T) {
	t.Parallel()
	c, store := newCharging(t)
	handle := deduplicated(t, store, "billing", func(msg *message.Message) ([]*message.Message, error) {
		if _, err := c.handle(msg); err != nil {
			return nil, err
		}
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte(`{}`))}, nil
	})
	for range 2 {
		produced, err := handle(eventMessage("event-1"))
		require.ErrorIs(t, err, outboxmw.ErrMessagesReturned)
		require.True(t, outbox.IsPermanent(err))
		require.Empty(t, produced)
	}
	require.EqualValues(t, 2, c.runs.Load(), "nothing recorded: each delivery runs the handler")
	require.Zero(t, c.charges(t))

	invalid := fmt.Errorf("publish: %w", outbox.ErrInvalidRequest)
	_, err := deduplicated(t, store, "billing", func(*message.Message) ([]*message.Message, error) {
		return nil, invalid
	})(eventMessage("event-2"))
	require.ErrorIs(t, err, invalid)
	require.False(t, outbox.IsPermanent(err), "the handler's own error, retried as it would be without Deduplicate")
}

// Added to a whole router, with no consumer set, Deduplicate keeps a
// record per handler: two handlers of one topic each handle an event once,
// however often it comes. With a consumer set it serves one handler, and
// refuses a second, whose events its record would skip.
func TestDeduplicateOnARouterKeepsARecordPerHandler(t *testing.T) {
	t.Parallel()
	for _, consumer := range []string{"", "billing"} {
		t.Run(fmt.Sprintf("consumer %q", consumer), func(t *testing.T) {
			t.Parallel()
			c, store := newCharging(t)
			dedupe, err := outboxmw.Deduplicate(store, outboxmw.DeduplicateConfig{Consumer: consumer})
			require.NoError(t, err)
			bus := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
			router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
			require.NoError(t, err)
			var mu sync.Mutex
			outcomes := map[string][]error{} // by handler
			router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
				return func(msg *message.Message) ([]*message.Message, error) {
					_, err := h(msg)
					mu.Lock()
					defer mu.Unlock()
					name := message.HandlerNameFromCtx(msg.Context())
					outcomes[name] = append(outcomes[name], err)
					return nil, nil // acked either way: the test reads the outcomes
				}
			}, dedupe)
			for _, name := range []string{"charge", "ship"} {
				router.AddConsumerHandler(name, "orders", bus, func(msg *message.Message) error {
					_, err := c.handle(msg)
					return err
				})
			}
			relaytest.RunRouter(t, router)
			for range 2 {
				require.NoError(t, bus.Publish("orders", eventMessage("event-1")))
			}
			relaytest.Eventually(t, "both handlers saw both deliveries", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(outcomes["charge"]) == 2 && len(outcomes["ship"]) == 2
			})
			mu.Lock()
			defer mu.Unlock()
			if consumer == "" {
				require.EqualValues(t, 2, c.runs.Load(), "each handler once")
				require.Equal(t, 2, c.charges(t))
				for _, errs := range outcomes {
					require.NoError(t, errors.Join(errs...))
				}
				return
			}
			require.EqualValues(t, 1, c.runs.Load(), "the first handler the consumer served, once")
			var refused int
			for _, errs := range outcomes {
				for _, err := range errs {
					if err != nil {
						require.True(t, outbox.IsPermanent(err))
						require.ErrorContains(t, err, "give each handler a Deduplicate of its own")
						refused++
					}
				}
			}
			require.Equal(t, 2, refused, "both deliveries to the second handler")
		})
	}
}

// On the relay: the handler's transaction commits, and something after it
// fails (a middleware outside, the router's publish), so the event is
// nacked and delivered again. The second delivery is acknowledged without
// running the handler again: one charge, the event DONE.
func TestDeduplicateBehindTheRelay(t *testing.T) {
	t.Parallel()
	c, store := newCharging(t)
	pool := c.pool
	dedupe, err := outboxmw.Deduplicate(store, outboxmw.DeduplicateConfig{Consumer: "billing"})
	require.NoError(t, err)
	var failedAfter atomic.Bool
	failOnceAfter := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			produced, err := h(msg)
			if err == nil && failedAfter.CompareAndSwap(false, true) {
				return nil, errors.New("failed after the handler committed")
			}
			return produced, err
		}
	}
	fast := watermilladapter.SubscriberConfig{RetryPolicy: outbox.Backoff{Base: 10 * time.Millisecond, Max: 10 * time.Millisecond, MaxAttempts: 5}}
	r := relaytest.Start(t, pool, fast, relaytest.Handlers{"orders": func(msg *message.Message) error {
		_, err := c.handle(msg)
		return err
	}}, failOnceAfter, dedupe)
	r.Publish(t, "orders", message.NewMessage(watermill.NewUUID(), []byte(`{}`)))

	relaytest.Eventually(t, "the event DONE", func() bool {
		var status int16
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT status FROM outbox_event`).Scan(&status))
		return outbox.Status(status) == outbox.StatusDone
	})
	require.True(t, failedAfter.Load())
	require.EqualValues(t, 1, c.runs.Load(), "delivered twice, handled once")
	require.Equal(t, 1, c.charges(t))
}
