package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// Claiming a backlog rewrites every row in place: a claim writes no column
// an index holds, and the table's fill factor leaves each page room for
// the new versions of its rows, so every claim is a heap-only update (no
// index entry, no row version on another page). The events are of a usual
// size (a 300-byte payload and the headers a Watermill message brings);
// a claimed row is longer than it was written, by its lease columns, and
// with rows much smaller than these some find no room on their page.
func TestClaimsAreHeapOnlyUpdates(t *testing.T) {
	t.Parallel()
	const backlog = 2000
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	events := make([]outbox.Envelope, backlog)
	for i := range events {
		events[i] = outbox.NewJSON("OrderCreated", fmt.Appendf(nil, `{"order_id": "order-%06d", "lines": [%s]}`,
			i, strings.Repeat(`{"sku": "SKU-1234", "qty": 2},`, 8)+`{"sku": "SKU-9", "qty": 1}`))
		events[i].Topic = "orders"
		events[i].AggregateType, events[i].AggregateID = "Order", fmt.Sprintf("order-%06d", i)
		events[i].Headers = map[string]string{"outbox_message_uuid": "0f8fad5b-d9cb-469f-a165-70867728950e",
			"outbox_event_type": "OrderCreated", "outbox_aggregate_type": "Order", "outbox_aggregate_id": events[i].AggregateID,
			"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}
	}
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, events...)
		return err
	}))

	// The claims run in one transaction, whose own counters are exact and
	// immediate; the statistics views lag.
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(t.Context()) }()
	inTx, err := postgres.NewStore(tx, postgres.Config{})
	require.NoError(t, err)
	p := storetest.ClaimParams("relay-a", "orders", 500, time.Now())
	claimed := 0
	for {
		events := follow(t, inTx, p)
		if len(events) == 0 {
			break
		}
		claimed += len(events)
	}
	require.Equal(t, backlog, claimed)

	var updated, heapOnly int
	require.NoError(t, tx.QueryRow(t.Context(), `SELECT pg_stat_get_xact_tuples_updated(c), pg_stat_get_xact_tuples_hot_updated(c)
		FROM CAST('outbox_event' AS regclass) AS c`).Scan(&updated, &heapOnly))
	require.Equal(t, backlog, updated)
	require.Equal(t, backlog, heapOnly, "every claim rewrote its row in place")
}

// A table that relays of an earlier version used is migrated with their
// claims in it: such a claim moved available_at to the end of its lease
// and has no locked_until, and it holds until then.
func TestUpgradeKeepsEarlierClaims(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)
	cfg := postgres.Config{Table: "upgraded_outbox"}
	migrateTo(t, pool, cfg, 1)

	// As version 1 left them: one event due, one claimed by a relay whose
	// lease ends a minute from now.
	start := storetest.Start
	for _, row := range []struct {
		id, owner string
		available time.Time
	}{{"due", "", start}, {"leased", "old-relay", start.Add(time.Minute)}} {
		_, err := pool.Exec(ctx, `INSERT INTO upgraded_outbox (event_id, event_type, topic, payload, occurred_at,
			available_at, created_at, updated_at, locked_by, locked_at) VALUES ($1, 'T', 'orders', '\x00', $2, $3, $2, $2,
			nullif($4, ''), CASE WHEN $4 <> '' THEN $2::timestamptz END)`, row.id, start, row.available, row.owner)
		require.NoError(t, err)
	}

	require.NoError(t, postgres.Migrate(ctx, pool, cfg))
	var params []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT reloptions FROM pg_class WHERE oid = 'upgraded_outbox'::regclass`).Scan(&params))
	require.Equal(t, []string{"fillfactor=50"}, params)

	clock := clocktest.New(start)
	cfg.Clock = clock
	store, err := postgres.NewStore(pool, cfg)
	require.NoError(t, err)
	storetest.CheckEarlierClaimHolds(t, store, clock)
}

// Migration 4 numbers the events already in the table in write order, so
// that an ordered claim delivers an aggregate's earlier events before the
// ones written after the upgrade; DONE rows, which no ordered claim
// reads, are left as they are.
func TestUpgradeOrdersEventsWrittenBefore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)
	cfg := postgres.Config{Table: "ordered_outbox"}
	migrateTo(t, pool, cfg, 3)
	// As version 3 left them: two events of order 1, the later with the
	// smaller id, and a delivered one.
	start := storetest.Start
	for _, row := range []struct {
		id      string
		written time.Time
		status  outbox.Status
	}{{"z-first", start, outbox.StatusNew}, {"a-second", start.Add(time.Second), outbox.StatusRetry}, {"done", start, outbox.StatusDone}} {
		_, err := pool.Exec(ctx, `INSERT INTO ordered_outbox (event_id, event_type, topic, aggregate_type, aggregate_id,
			payload, status, occurred_at, available_at, created_at, updated_at)
			VALUES ($1, 'T', 'orders', 'Order', '1', '\x00', $2, $3, $3, $3, $3)`, row.id, row.status, row.written)
		require.NoError(t, err)
	}
	require.NoError(t, postgres.Migrate(ctx, pool, cfg))

	clock := clocktest.New(start.Add(time.Minute))
	cfg.Clock = clock
	store, err := postgres.NewStore(pool, cfg)
	require.NoError(t, err)
	newer := storetest.JSONEvent(0)
	newer.ID, newer.Topic, newer.AggregateType, newer.AggregateID = "0-newer", "orders", "Order", "1"
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, newer)
		return err
	}))

	for _, want := range []string{"z-first", "a-second", "0-newer"} {
		p := storetest.ClaimParams("r", "orders", 100, clock.Now())
		p.Ordered = true
		require.Equal(t, []string{want}, claimIDs(t, store, p))
		require.EqualValues(t, 1, markDone(t, store, clock.Now(), want))
	}
	var unnumbered bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT seq IS NULL FROM ordered_outbox WHERE event_id = 'done'`).Scan(&unnumbered))
	require.True(t, unnumbered, "DONE rows are not rewritten")
}

// migrateTo applies cfg's first version migrations and records them, as
// a relay of that version left the table.
func migrateTo(t *testing.T, pool *pgxpool.Pool, cfg postgres.Config, version int) {
	t.Helper()
	migrations, err := postgres.Migrations(cfg)
	require.NoError(t, err)
	for _, m := range migrations[:version] {
		_, err = pool.Exec(t.Context(), m.SQL)
		require.NoError(t, err)
		_, err = pool.Exec(t.Context(), `INSERT INTO wmoutbox_migration (table_name, version, name) VALUES ($1, $2, $3)`,
			cfg.Table, m.Version, m.Name)
		require.NoError(t, err)
	}
}
