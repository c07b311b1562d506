// Package relaytest starts a whole outbox relay for tests: a PostgreSQL
// store, a watermilladapter Subscriber and Publisher (the subscriber as hot
// path), and a Watermill router running handlers behind
// middleware.RecordErrors.
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
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	return r
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
	deadline := time.Now().Add(WaitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
