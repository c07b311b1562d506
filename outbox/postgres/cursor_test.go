package postgres_test

import (
	"context"
	"slices"
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
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// With a cursor, a claim skips what lies behind it: an event released at
// the time it was first due waits until the cursor is reset.
func TestClaimCursorSkipsWhatLiesBehindIt(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{Clock: clocktest.New(storetest.Start)})
	require.NoError(t, err)
	written := writeEvents(t, store, 3)

	p := storetest.ClaimParams("me", "orders", 2, storetest.Start)
	require.Equal(t, written[:2], follow(t, store, p))
	require.Equal(t, written[1], p.After.ID, "the cursor is at the last event claimed")
	require.Equal(t, storetest.Start, p.After.DueAt.UTC())

	n, err := store.Driver().Release(t.Context(), outboxdriver.ReleaseParams{Owner: "me", IDs: written[:1]})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, written[2:], follow(t, store, p), "the released event lies behind the cursor")
	require.Empty(t, follow(t, store, p))

	p.After = nil
	require.Equal(t, written[:1], follow(t, store, p))
}

// TestClaimPlan: the cursor is where the due index scan starts, not a
// filter applied to the rows it walks, which spares a claim the index
// entries of the rows claimed before it; and the rows it locked are
// updated by ctid, without a primary key descent each.
func TestClaimPlan(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	writeEvents(t, store, 5000) // enough for the planner to prefer the index
	conn := planner(t, pool)
	now := time.Now()
	plan := explain(t, conn, postgres.ClaimStatement(store, true, false),
		now, now, now.Add(time.Minute), 100, "me", "orders", now.Add(-time.Hour), "")
	text := strings.Join(plan, "\n")
	require.Contains(t, text, "outbox_event_due_idx", "the claim scans the due index:\n%s", text)
	require.Contains(t, text, "Tid Scan", "the claim updates the rows it locked by ctid:\n%s", text)
	require.True(t, slices.ContainsFunc(plan, func(line string) bool {
		return strings.Contains(line, "Index Cond") && strings.Contains(line, "ROW(available_at")
	}), "the cursor is not an index condition of the claim:\n%s", text)
}

// An ordered claim walks the aggregate index, one descent per aggregate
// from the cursor on, and never the events behind the first of each.
func TestOrderedClaimPlan(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	writeEvents(t, store, 5000)
	// Aggregates of 5 events each.
	_, err = pool.Exec(t.Context(), `UPDATE outbox_event SET aggregate_id = (seq / 5)::text`)
	require.NoError(t, err)
	conn := planner(t, pool)
	now := time.Now()
	plan := explain(t, conn, postgres.ClaimStatement(store, true, true),
		now, now, now.Add(time.Minute), 100, "me", "orders", "orders", "OrderCreated", false, "7")
	text := strings.Join(plan, "\n")
	require.Contains(t, text, "Recursive Union", "the claim walks the aggregates:\n%s", text)
	require.NotContains(t, text, "outbox_event_due_idx", "the claim does not scan events in due order:\n%s", text)
	require.Contains(t, text, "Tid Scan", "the claim locks and updates the heads by ctid:\n%s", text)
	var bounded int
	for _, line := range plan {
		if strings.Contains(line, "Index Cond") && strings.Contains(line, "ROW((topic)::text") {
			bounded++
		}
	}
	require.Equal(t, 2, bounded, "the cursor and each step are where the index scans start:\n%s", text)
}

// planner is a connection of the test's pool without hash joins, as the
// planner chooses for tables large enough to matter: on a few thousand
// rows it would rather scan them all than fetch a hundred.
func planner(t *testing.T, pool *pgxpool.Pool) *pgxpool.Conn {
	t.Helper()
	_, err := pool.Exec(t.Context(), `ANALYZE outbox_event`)
	require.NoError(t, err)
	conn, err := pool.Acquire(t.Context())
	require.NoError(t, err)
	t.Cleanup(conn.Release)
	_, err = conn.Exec(t.Context(), `SET enable_hashjoin = off`)
	require.NoError(t, err)
	return conn
}

func explain(t *testing.T, conn *pgxpool.Conn, sql string, args ...any) []string {
	t.Helper()
	rows, err := conn.Query(t.Context(), "EXPLAIN "+sql, args...)
	require.NoError(t, err)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return plan
}

// writeEvents commits n events on topic "orders", in due order, and
// returns their ids.
func writeEvents(t *testing.T, store *postgres.Store, n int) []string {
	t.Helper()
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	var ids []string
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		ids, err = writer.Write(ctx, tx, storetest.JSONEvents(n, "orders")...)
		return err
	}))
	return ids
}

// claimIDs runs p on store's driver and returns the ids claimed, in due
// order.
func claimIDs(t *testing.T, store *postgres.Store, p *outboxdriver.ClaimParams) []string {
	t.Helper()
	return storetest.IDs(storetest.Claim(t, store.Driver(), p))
}

// follow is claimIDs for a claim that follows a cursor, as the relay's
// claims of a backlog do: it moves p.After past the rows claimed.
func follow(t *testing.T, store *postgres.Store, p *outboxdriver.ClaimParams) []string {
	t.Helper()
	rows := storetest.Claim(t, store.Driver(), p)
	if at := storetest.SortClaimed(rows, p.Ordered); at != nil {
		p.After = at
	}
	return storetest.IDs(rows)
}

// markDone records ids delivered at now.
func markDone(t *testing.T, store *postgres.Store, now time.Time, ids ...string) int64 {
	t.Helper()
	n, err := store.Driver().MarkDone(t.Context(), outboxdriver.MarkDoneParams{Now: now, IDs: ids})
	require.NoError(t, err)
	return n
}

// Under a linguistic collation the due index orders ids as the collation
// does, not byte by byte as Go compares them (as the relay sorts): "B2"
// sorts after "a1" in the index and before it in Go. Events due at the
// same time, whose order is their ids', are still each claimed once, and
// no claim that follows the cursor passes over one: a claim's last event
// in Go's order is never after its last in the index's, so the cursor
// never runs ahead of what was claimed.
func TestClaimCursorUnderALinguisticCollation(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(storetest.Start) // every event due at the same time
	store, err := postgres.NewStore(pool, postgres.Config{Clock: clock})
	require.NoError(t, err)
	// As in a database created with an ICU or glibc locale other than C.
	_, err = pool.Exec(t.Context(), `ALTER TABLE outbox_event ALTER COLUMN event_id TYPE varchar(36) COLLATE "und-x-icu"`)
	require.NoError(t, err)

	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	events := storetest.JSONEvents(5, "orders")
	for i, id := range []string{"e5", "D4", "c3", "B2", "a1"} {
		events[i].ID = id
	}
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, events...)
		return err
	}))

	p := storetest.ClaimParams("me", "orders", 2, storetest.Start)
	require.Equal(t, []string{"B2", "a1"}, follow(t, store, p), "the index's first two, in Go's order")
	require.Equal(t, "a1", p.After.ID)
	require.Equal(t, []string{"D4", "c3"}, follow(t, store, p))
	require.Equal(t, []string{"e5"}, follow(t, store, p))
	require.Empty(t, follow(t, store, p))
}

// Ordered claims that follow a cursor take the aggregates in turn: each
// starts after the aggregate of the previous one's last event, and an
// event without an aggregate id is an aggregate of its own.
func TestOrderedClaimCursorTakesAggregatesInTurn(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{Clock: clocktest.New(storetest.Start)})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	var events []outbox.Envelope
	for _, name := range []string{"a1", "b1", "c1", "keyless", "a2", "b2", "c2"} {
		e := storetest.JSONEvent(0)
		e.ID, e.Topic, e.AggregateType, e.AggregateID = name, "orders", "Order", name[:1]
		if name == "keyless" {
			e.AggregateID = ""
		}
		events = append(events, e)
	}
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, events...)
		return err
	}))

	p := storetest.ClaimParams("me", "orders", 2, storetest.Start)
	p.Ordered = true
	require.ElementsMatch(t, []string{"a1", "b1"}, follow(t, store, p))
	require.Equal(t, "b", p.After.Key, "the cursor is at the last aggregate claimed")
	require.ElementsMatch(t, []string{"c1", "keyless"}, follow(t, store, p), "after it, the keyless event last")
	require.Empty(t, follow(t, store, p))

	require.EqualValues(t, 2, markDone(t, store, storetest.Start, "a1", "c1"))
	require.Empty(t, follow(t, store, p), "a2 and c2 lie behind the cursor")
	p.After = nil
	require.ElementsMatch(t, []string{"a2", "c2"}, follow(t, store, p))
}

// An empty aggregate id (written by another program; this package writes
// NULL) reads back as none, and an ordered claim treats it so: such
// events are not ordered, as the relay, which sees no aggregate, assumes,
// and each is an aggregate of its own for the cursor.
func TestOrderedClaimTreatsAnEmptyAggregateIDAsNone(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	for _, id := range []string{"e1", "e2"} {
		_, err := pool.Exec(ctx, `INSERT INTO outbox_event (event_id, event_type, topic, aggregate_type, aggregate_id,
			payload, occurred_at, available_at, created_at, updated_at)
			VALUES ($1, 'T', 'orders', 'Order', '', '\x00', $2, $2, $2, $2)`, id, storetest.Start)
		require.NoError(t, err)
	}
	p := storetest.ClaimParams("r", "orders", 1, storetest.Start)
	p.Ordered = true
	require.Equal(t, []string{"e1"}, follow(t, store, p))
	require.Equal(t, []string{"e2"}, follow(t, store, p), "the cursor passed e1 alone")
	require.Empty(t, follow(t, store, p))
}
