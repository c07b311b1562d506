package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// LogSlots reads the database's logical slots: the log written since the
// slot's confirmed position, and, once a feed recorded it in the lease
// table, who confirmed it and when. Store.Stats lists them with the age of
// that confirmation on the store's clock.
func TestLogSlots(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)
	slot := testdb.LogicalSlot(t, pool.Config().ConnString())
	clock := clocktest.New(storetest.Start)
	store, err := postgres.NewStore(pool, postgres.Config{Clock: clock})
	require.NoError(t, err)
	reader, ok := store.Driver().(outboxdriver.LogSlotReader)
	require.True(t, ok, "the PostgreSQL driver reads log slots")

	// A committed event: log written after the slot's position, flushed.
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, outbox.NewJSON("OrderCreated", []byte(`{}`)))
		return err
	}))

	slots, err := reader.LogSlots(ctx)
	require.NoError(t, err)
	require.Len(t, slots, 1, "the slot of this database only: %+v", slots)
	got := slots[0]
	require.Equal(t, slot, got.Name)
	require.False(t, got.Active, "nobody reads it")
	require.Positive(t, got.LagBytes, "the event's log is behind the slot's position")
	require.Equal(t, "reserved", got.WALStatus)
	require.Empty(t, got.Reader, "no feed recorded its progress")
	require.True(t, got.ConfirmedAt.IsZero())

	confirmed := clock.Now().Add(-90 * time.Second)
	held, err := store.Driver().AcquireLease(ctx, outboxdriver.LeaseParams{Name: outboxdriver.SlotLeasePrefix + slot,
		Owner: "relay-1", Now: confirmed, Until: confirmed})
	require.NoError(t, err)
	require.True(t, held)
	// Another row whose name only looks alike is not the slot's.
	held, err = store.Driver().AcquireLease(ctx, outboxdriver.LeaseParams{Name: slot, Owner: "relay-2", Now: clock.Now(), Until: clock.Now()})
	require.NoError(t, err)
	require.True(t, held)

	slots, err = reader.LogSlots(ctx)
	require.NoError(t, err)
	require.Len(t, slots, 1)
	require.Equal(t, "relay-1", slots[0].Reader)
	require.True(t, confirmed.Equal(slots[0].ConfirmedAt), "%v", slots[0].ConfirmedAt)

	stats, err := store.Stats(ctx)
	require.NoError(t, err)
	require.Len(t, stats.Slots, 1)
	st := stats.Slots[0]
	require.Equal(t, slot, st.Name)
	require.Equal(t, "relay-1", st.Reader)
	require.GreaterOrEqual(t, st.LagBytes, got.LagBytes)
	require.Equal(t, 90*time.Second, st.ConfirmedAge)

	pending, err := store.Driver().Stats(ctx, outboxdriver.StatsParams{Now: clock.Now(), PendingOnly: true})
	require.NoError(t, err)
	require.Empty(t, pending.Slots, "the relay's periodic read has no slots")
}
