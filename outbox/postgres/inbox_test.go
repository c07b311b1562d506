package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// markProcessed records id for consumer in a transaction of its own and
// reports whether it was new.
func markProcessed(t *testing.T, store *postgres.Store, consumer, id string) bool {
	t.Helper()
	var first bool
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) (err error) {
		first, err = store.MarkProcessed(ctx, tx, consumer, id)
		return err
	}))
	return first
}

// An event is new to a consumer once: committed, its record makes every
// later delivery a duplicate, for that consumer only; rolled back, it
// leaves no record.
func TestMarkProcessedOncePerConsumer(t *testing.T) {
	t.Parallel()
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{})
	require.NoError(t, err)

	require.True(t, markProcessed(t, store, "billing", "event-1"))
	require.False(t, markProcessed(t, store, "billing", "event-1"), "recorded already")
	require.True(t, markProcessed(t, store, "shipping", "event-1"), "another consumer")

	err = store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		first, err := store.MarkProcessed(ctx, tx, "billing", "event-2")
		require.NoError(t, err)
		require.True(t, first)
		return context.Canceled // the handler failed: roll back
	})
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, markProcessed(t, store, "billing", "event-2"), "the rolled-back record is gone")
}

// Two deliveries of one event at once: the second waits for the first's
// transaction, and finds the event processed if it commits, new if it
// rolls back.
func TestMarkProcessedWaitsForAnOpenTransaction(t *testing.T) {
	t.Parallel()
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{})
	require.NoError(t, err)
	for _, commit := range []bool{true, false} {
		id := map[bool]string{true: "committed", false: "rolled-back"}[commit]
		holding, release := make(chan struct{}), make(chan struct{})
		firstDone := make(chan error, 1)
		go func() {
			firstDone <- store.InTx(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
				if _, err := store.MarkProcessed(ctx, tx, "billing", id); err != nil {
					return err
				}
				close(holding)
				<-release
				if !commit {
					return context.Canceled
				}
				return nil
			})
		}()
		<-holding
		var first bool
		second := make(chan error, 1)
		go func() {
			second <- store.InTx(context.Background(), func(ctx context.Context, tx pgx.Tx) (err error) {
				first, err = store.MarkProcessed(ctx, tx, "billing", id)
				return err
			})
		}()
		select {
		case <-second:
			t.Fatal("the second delivery did not wait for the first's transaction")
		case <-time.After(200 * time.Millisecond):
		}
		close(release)
		err := <-firstDone
		if commit {
			require.NoError(t, err)
		}
		require.NoError(t, <-second)
		require.Equal(t, !commit, first, "new to the second delivery only if the first rolled back")
	}
}

func TestMarkProcessedRefusesBadInput(t *testing.T) {
	t.Parallel()
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{})
	require.NoError(t, err)
	_, err = store.MarkProcessed(t.Context(), nil, "billing", "event-1")
	require.ErrorIs(t, err, outbox.ErrNoTransaction)
	for _, bad := range [][2]string{
		{"", "event-1"}, {"billing", ""}, {strings.Repeat("é", outbox.MaxConsumerLen+1), "event-1"},
		{"billing", "event\x00"}, {"billing", strings.Repeat("e", outbox.MaxProcessedIDLen+1)},
	} {
		err := store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			_, err := store.MarkProcessed(ctx, tx, bad[0], bad[1])
			return err
		})
		require.ErrorIs(t, err, outbox.ErrInvalidRequest, "%q", bad)
	}
	require.True(t, markProcessed(t, store, strings.Repeat("é", outbox.MaxConsumerLen), strings.Repeat("e", outbox.MaxProcessedIDLen)),
		"at the limits, in characters")
}

// Records older than the retention go, and their events are new again;
// younger ones stay. Records of a schema and table of one's own live
// beside that table.
func TestPurgeProcessed(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	cfg := postgres.Config{Schema: "shop", Table: "events", Clock: clocktest.New(storetest.Start)}
	_, err := pool.Exec(t.Context(), `CREATE SCHEMA shop`)
	require.NoError(t, err)
	require.NoError(t, postgres.Migrate(t.Context(), pool, cfg))
	store, err := postgres.NewStore(pool, cfg)
	require.NoError(t, err)
	clock := cfg.Clock.(*clocktest.Clock)

	for _, id := range []string{"old-1", "old-2", "old-3"} {
		require.True(t, markProcessed(t, store, "billing", id))
	}
	clock.Advance(48 * time.Hour)
	require.True(t, markProcessed(t, store, "billing", "young"))

	_, err = store.PurgeProcessed(t.Context(), 0)
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	n, err := store.PurgeProcessed(t.Context(), 24*time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	require.True(t, markProcessed(t, store, "billing", "old-1"), "purged: new again")
	require.False(t, markProcessed(t, store, "billing", "young"), "kept")

	var rows int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM shop.events_inbox`).Scan(&rows))
	require.Equal(t, 2, rows)
}
