package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// A claim that names aggregates looks each one up in the aggregate index,
// whatever holds back the others of the topic; the walk of an ordered claim
// reads the first event of every aggregate it passes.
func TestClaimOfNamedAggregatesReadsOnlyThem(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	const heldBack = 2000
	var events []outbox.Envelope
	for i := range heldBack {
		e := outbox.NewJSON("OrderCreated", []byte(`{}`))
		e.Topic, e.AggregateType, e.AggregateID = "orders", "Order", fmt.Sprint("held-", i)
		e.DeliverAfter = time.Now().Add(24 * time.Hour)
		events = append(events, e)
	}
	for range 3 {
		e := outbox.NewJSON("OrderCreated", []byte(`{}`))
		e.Topic, e.AggregateType, e.AggregateID = "orders", "Order", "live"
		events = append(events, e)
	}
	ids := commit(t, store, events...)
	conn := planner(t, pool)
	now := time.Now()
	lease := []any{now, now, now.Add(time.Minute), 100, "me"}

	walked := aggregateIndexReads(t, conn, postgres.ClaimStatement(store, false, true), append(lease, "orders")...)
	require.GreaterOrEqual(t, walked, heldBack, "the walk reads the first event of every aggregate")

	named := []outboxdriver.Aggregate{{Topic: "orders", Type: "Order", ID: "live"}, {Topic: "orders", Type: "Order", ID: "held-7"}}
	types, aggIDs := postgres.TextArray{"Order", "Order"}, postgres.TextArray{"live", "held-7"}
	unbounded := []int64{math.MaxInt64, math.MaxInt64}
	read := aggregateIndexReads(t, conn, postgres.ClaimHeadsStatement(store), append(lease, "orders", types, aggIDs, unbounded)...)
	require.Equal(t, len(named), read, "one descent per aggregate named")

	p := storetest.ClaimParams("me", "orders", 100, time.Now())
	p.Ordered, p.Aggregates = true, named
	claimed := claimIDs(t, store, p)
	require.Equal(t, ids[heldBack:heldBack+1], claimed, "the first event of the live aggregate; the other is due tomorrow")
}

// aggregateIndexReads runs sql under EXPLAIN ANALYZE, in a transaction it
// rolls back, and returns how many times it looked in the aggregate index.
func aggregateIndexReads(t *testing.T, conn interface {
	Begin(context.Context) (pgx.Tx, error)
}, sql string, args ...any) int {
	t.Helper()
	tx, err := conn.Begin(t.Context())
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Rollback(t.Context())) }()
	var out []byte
	require.NoError(t, tx.QueryRow(t.Context(), "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&out))
	var plans []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal(out, &plans))
	var loops func(n planNode) int
	loops = func(n planNode) int {
		total := 0
		if n.IndexName == "outbox_event_aggregate_idx" {
			total += n.ActualLoops
		}
		for _, child := range n.Plans {
			total += loops(child)
		}
		return total
	}
	return loops(plans[0].Plan)
}

type planNode struct {
	IndexName   string     `json:"Index Name"`
	ActualLoops int        `json:"Actual Loops"`
	Plans       []planNode `json:"Plans"`
}

// A claim that names aggregates takes the first events of those
// aggregates only, not the first event of another that is due; an event
// without an aggregate id (NULL, or an empty one from another program)
// whose own id equals a named aggregate id is not of that aggregate.
func TestClaimOfNamedAggregatesTakesOnlyThem(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	mk := func(id, aggregateID string) outbox.Envelope {
		e := outbox.NewJSON("OrderCreated", []byte(`{}`))
		e.ID, e.Topic, e.AggregateType, e.AggregateID = id, "orders", "Order", aggregateID
		return e
	}
	commit(t, store, mk("other", "o-2"), mk("x1", ""), mk("x2", ""), mk("of-x1", "x1"), mk("of-x2", "x2"))
	_, err = pool.Exec(t.Context(), `UPDATE outbox_event SET aggregate_id = '' WHERE event_id = 'x2'`)
	require.NoError(t, err)
	p := storetest.ClaimParams("me", "orders", 100, time.Now())
	p.Ordered = true
	p.Aggregates = []outboxdriver.Aggregate{{Topic: "orders", Type: "Order", ID: "x1"}, {Topic: "orders", Type: "Order", ID: "x2"}}
	require.ElementsMatch(t, []string{"of-x1", "of-x2"}, claimIDs(t, store, p))
}

// commit writes events in one transaction and returns their ids.
func commit(t *testing.T, store *postgres.Store, events ...outbox.Envelope) []string {
	t.Helper()
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	var ids []string
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		ids, err = writer.Write(ctx, tx, events...)
		return err
	}))
	return ids
}
