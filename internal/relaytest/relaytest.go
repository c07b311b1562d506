// Package relaytest starts a whole outbox relay for tests: a PostgreSQL
// store, a watermilladapter Subscriber and Publisher (the subscriber as hot
// path), and a Watermill router running handlers behind
// middleware.RecordErrors; and waits for what the relay does, on the
// system clock or on a clocktest.Clock that the test moves.
package relaytest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// WaitLimit bounds every wait of a relay test.
const WaitLimit = 20 * time.Second

// Relay is one process's outbox.
type Relay struct {
	Store  *postgres.Store
	Sub    *watermilladapter.Subscriber
	Pub    *watermilladapter.Publisher[pgx.Tx]
	Router *message.Router
}

// Handlers maps outbox topics to router handlers.
type Handlers map[string]message.NoPublishHandlerFunc

// Start builds a relay on pool and, when hs is not empty, runs a router
// with hs behind middleware.RecordErrors and mw. PollInterval defaults to
// 100 ms. Everything is closed at test cleanup.
func Start(t *testing.T, pool *pgxpool.Pool, cfg watermilladapter.SubscriberConfig, hs Handlers, mw ...message.HandlerMiddleware) *Relay {
	t.Helper()
	return StartStore(t, pool, postgres.Config{}, cfg, hs, mw...)
}

// StartOnClock is Start with clock as the store's and the subscriber's
// clock: every wait of the relay (polls, cooldowns, the settler's linger,
// leases, DrainTimeout) ends when the test moves the clock past it.
func StartOnClock(t *testing.T, pool *pgxpool.Pool, clock *clocktest.Clock, cfg watermilladapter.SubscriberConfig, hs Handlers, mw ...message.HandlerMiddleware) *Relay {
	t.Helper()
	cfg.Clock = clock
	return StartStore(t, pool, postgres.Config{Clock: clock}, cfg, hs, mw...)
}

// StartStore is Start with a store configured by storeCfg.
func StartStore(t *testing.T, pool *pgxpool.Pool, storeCfg postgres.Config, cfg watermilladapter.SubscriberConfig, hs Handlers, mw ...message.HandlerMiddleware) *Relay {
	t.Helper()
	store, err := postgres.NewStore(pool, storeCfg)
	require.NoError(t, err)
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	sub, err := watermilladapter.NewSubscriber(store, cfg)
	require.NoError(t, err)
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: sub})
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(append([]message.HandlerMiddleware{outboxmw.RecordErrors}, mw...)...)
	for topic, h := range hs {
		router.AddConsumerHandler("handle-"+topic, topic, sub, h)
	}
	r := &Relay{Store: store, Sub: sub, Pub: pub, Router: router}
	if len(hs) > 0 {
		RunRouter(t, router)
	}
	clock, _ := cfg.Clock.(*clocktest.Clock)
	t.Cleanup(func() { require.NoError(t, Close(t, sub, clock)) })
	return r
}

// Close closes sub and returns what Close returns. With a clock, it moves
// the clock on while Close waits, no faster than real time, so that what
// Close waits for on it (DrainTimeout for a handler that never answers, at
// the end of a test that failed halfway) ends, while the statements it
// sends get as long as on the system clock.
func Close(t *testing.T, sub *watermilladapter.Subscriber, clock *clocktest.Clock) error {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	if clock == nil {
		return <-closed
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-closed:
			return err
		case <-tick.C:
			clock.Advance(time.Millisecond)
		}
	}
}

// RunRouter runs router until the end of the test, and returns once it
// runs.
func RunRouter(t *testing.T, router *message.Router) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- router.Run(context.Background()) }()
	t.Cleanup(func() {
		require.NoError(t, router.Close())
		require.NoError(t, <-done)
	})
	select {
	case <-router.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	}
}

// ErrRollback is what PublishRollback's transaction fails with.
var ErrRollback = errors.New("business rule failed: roll back")

// Publish writes msgs on topic in one committed business transaction.
func (r *Relay) Publish(t *testing.T, topic string, msgs ...*message.Message) {
	t.Helper()
	require.NoError(t, r.inTx(t, topic, msgs, nil))
}

// PublishRollback writes msgs on topic in a transaction that then fails
// and rolls back.
func (r *Relay) PublishRollback(t *testing.T, topic string, msgs ...*message.Message) {
	t.Helper()
	require.ErrorIs(t, r.inTx(t, topic, msgs, ErrRollback), ErrRollback)
}

func (r *Relay) inTx(t *testing.T, topic string, msgs []*message.Message, fail error) error {
	return r.Store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		for _, m := range msgs {
			m.SetContext(ctx)
		}
		if err := r.Pub.Publish(topic, msgs...); err != nil {
			return err
		}
		return fail
	})
}

// Eventually waits for cond, failing the test after WaitLimit.
func Eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	AdvanceUntil(t, nil, 0, what, cond)
}

// AdvanceUntil waits for cond, moving clock forward by step between two
// looks, and fails the test after WaitLimit in real time; with a nil
// clock, it only waits. Keep step well below the leases and timeouts that
// must not run out meanwhile: time passes in steps of it while the relay
// works.
func AdvanceUntil(t *testing.T, clock *clocktest.Clock, step time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(WaitLimit)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if clock != nil {
			clock.Advance(step)
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// WaitForTimer waits until a goroutine waits on clock for d, failing the
// test after WaitLimit.
func WaitForTimer(t *testing.T, clock *clocktest.Clock, d time.Duration) {
	t.Helper()
	if !clock.WaitForTimer(d, WaitLimit) {
		t.Fatalf("nothing waits for %s; the clock's timers: %v", d, clock.Armed())
	}
}
