package watermilladapter_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

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
	hot := &hotPathSpy{Subscriber: r.Sub}
	pub, err := watermilladapter.NewPublisher(r.Store, watermilladapter.PublisherConfig{HotPath: hot})
	require.NoError(t, err)
	publishIn := func(ctx context.Context, tx pgx.Tx, payload string) error {
		msg := newMsg(payload)
		msg.SetContext(outbox.ContextWithTx(ctx, tx))
		return pub.Publish("orders", msg)
	}
	// inTxOf runs fn in a savepoint of tx, as a store on tx does.
	inTxOf := func(ctx context.Context, tx pgx.Tx, fn func(ctx context.Context, savepoint pgx.Tx) error) error {
		store, err := postgres.NewStore(tx, postgres.Config{})
		require.NoError(t, err)
		return store.InTx(ctx, fn)
	}

	require.NoError(t, r.Store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		savepoint, err := tx.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, publishIn(ctx, savepoint, "rolled back to its savepoint"))
		return savepoint.Rollback(ctx)
	}))
	outer, err := pool.Begin(t.Context())
	require.NoError(t, err)
	require.NoError(t, inTxOf(t.Context(), outer, func(ctx context.Context, tx pgx.Tx) error {
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
		return inTxOf(ctx, tx, func(ctx context.Context, savepoint pgx.Tx) error {
			return publishWhileSavepointOpen(ctx, savepoint, "rolled back to a savepoint in a savepoint", rollBack)
		})
	}))
	require.Zero(t, rowCount(t, pool))
	require.Zero(t, hot.events(), "events handed to the hot path")

	// Nested in an InTx that commits, the savepoint's events are delivered
	// after that commit.
	require.NoError(t, r.Store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		require.NoError(t, inTxOf(ctx, tx, func(ctx context.Context, savepoint pgx.Tx) error {
			return publishIn(ctx, savepoint, "committed")
		}))
		require.Zero(t, hot.events(), "events handed to the hot path before their transaction committed")
		return nil
	}))
	require.Equal(t, 1, hot.events(), "handed to the hot path at the commit")
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

// hotPathSpy is a Subscriber's hot path that counts the events handed to
// it: the hand-over runs in the committing goroutine, before InTx returns.
type hotPathSpy struct {
	*watermilladapter.Subscriber
	mu     sync.Mutex
	handed int
}

func (h *hotPathSpy) DeliverHot(ctx context.Context, events []outbox.Envelope, claimLeft time.Duration) {
	h.mu.Lock()
	h.handed += len(events)
	h.mu.Unlock()
	h.Subscriber.DeliverHot(ctx, events, claimLeft)
}

func (h *hotPathSpy) events() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.handed
}
