package watermilladapter_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// A table nobody migrated fails the first Subscribe with the migration to
// run, rather than a relay that logs nothing and delivers nothing.
func TestSubscribeRefusesATableNotMigrated(t *testing.T) {
	t.Parallel()
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{Table: "never_migrated"})
	require.NoError(t, err)
	for name, cfg := range map[string]watermilladapter.SubscriberConfig{
		"default": {},
		// The tracer wraps the driver; the check must still see it.
		"traced": {Tracer: noTracer{}},
	} {
		sub, err := watermilladapter.NewSubscriber(store, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, sub.Close()) })
		_, err = sub.Subscribe(t.Context(), "orders")
		require.ErrorIs(t, err, outbox.ErrNotMigrated, name)
		require.EqualError(t, err, "watermilladapter: subscribe to orders: postgres: check: table never_migrated does not exist: "+
			"run postgres.Migrate or `wmoutbox migrate up`", name)
	}
}

// noTracer traces nothing.
type noTracer struct{}

func (noTracer) StartStatement(ctx context.Context, _ watermilladapter.Statement) (context.Context, func(int, error)) {
	return ctx, func(int, error) {}
}

// Two subscriptions of one topic in one Subscriber are a mistake unless
// the configuration says they are meant.
func TestSubscribeRefusesASecondSubscriptionOfATopic(t *testing.T) {
	t.Parallel()
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{})
	require.NoError(t, err)
	_, _ = subscribe(t, store, watermilladapter.SubscriberConfig{}, "orders")
	sub, _ := subscribe(t, store, watermilladapter.SubscriberConfig{}, "orders")
	_, err = sub.Subscribe(t.Context(), "invoices")
	require.NoError(t, err, "another topic")
	_, err = sub.Subscribe(t.Context(), "orders")
	require.ErrorIs(t, err, watermilladapter.ErrTopicSubscribed)
	require.EqualError(t, err, "watermilladapter: subscribe to orders: topic already subscribed: "+
		"each subscription would get only some of its events (set SubscriberConfig.AllowSharedTopic to split them among subscriptions)")

	shared, _ := subscribe(t, store, watermilladapter.SubscriberConfig{AllowSharedTopic: true}, "orders")
	_, err = shared.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
}

// A publish that finds no transaction of the store's type says what it
// found, and what to do.
func TestPublishSaysWhatTransactionItFound(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{})
	require.NoError(t, err)

	msg := newMsg("a")
	msg.SetContext(outbox.ContextWithTx(t.Context(), &sql.Tx{}))
	err = pub.Publish("orders", msg)
	require.ErrorIs(t, err, outbox.ErrNoTransaction)
	require.EqualError(t, err, "watermilladapter: publish to orders: outbox: write requires a transaction: "+
		"the store's transactions are pgx.Tx; the message context carries *sql.Tx")

	// Inside InTx, a message whose context was not set.
	err = store.InTx(t.Context(), func(ctx context.Context, _ pgx.Tx) error {
		return pub.Publish("orders", newMsg("b"))
	})
	require.ErrorIs(t, err, outbox.ErrNoTransaction)
	require.EqualError(t, err, "watermilladapter: publish to orders: outbox: write requires a transaction: "+
		"the message context carries none; inside InTx, call msg.SetContext(ctx) with the context InTx gave "+
		"(or bind a transaction with WithTx, or set OwnTransaction)")
	require.Zero(t, rowCount(t, pool))
}

// The texts of the adapter's invalid requests: package, operation, then
// the sentinel and what was wrong.
func TestInvalidRequestTexts(t *testing.T) {
	t.Parallel()
	store := storeOn(t, noDriver{}, nil)
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{})
	require.NoError(t, err)
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	_, subscribeErr := sub.Subscribe(t.Context(), "")
	_, newSubErr := watermilladapter.NewSubscriber[pgx.Tx](nil, watermilladapter.SubscriberConfig{})
	for _, tt := range []struct {
		err  error
		text string
	}{
		{pub.Publish("", newMsg("a")), "watermilladapter: publish: outbox: invalid request: no topic"},
		{pub.Publish("orders", newMsg("a"), nil), "watermilladapter: publish to orders: outbox: invalid request: message 1 is nil"},
		{subscribeErr, "watermilladapter: subscribe: outbox: invalid request: no topic"},
		{newSubErr, "watermilladapter: new subscriber: outbox: invalid request: no store"},
	} {
		require.EqualError(t, tt.err, tt.text)
		require.ErrorIs(t, tt.err, outbox.ErrInvalidRequest)
	}
}
