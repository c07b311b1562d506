package postgres_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// UnfinishedBefore finds, for each row, an event of its aggregate and
// topic inserted before it and not DONE; rows read back carry their seq.
func TestUnfinishedBefore(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	event := func(topic, aggregate string) outbox.Envelope {
		e := outbox.NewJSON("OrderCreated", []byte(`{}`))
		e.Topic, e.AggregateType, e.AggregateID = topic, "Order", aggregate
		return e
	}
	ids := commit(t, store, event("orders", "a"), event("orders", "a"), event("orders", "b"), event("billing", "c"))
	late := commit(t, store, event("billing", "b"), event("orders", "c"))
	rows := make(map[string]outboxdriver.Row)
	for _, id := range append(ids, late...) {
		r, ok, err := store.Driver().Get(t.Context(), id)
		require.NoError(t, err)
		require.True(t, ok)
		rows[id] = r
	}
	a1, a2, b, c := rows[ids[0]], rows[ids[1]], rows[ids[2]], rows[late[1]]
	require.Less(t, a1.Seq, a2.Seq, "seq follows the inserts")
	require.Less(t, a2.Seq, c.Seq)

	ask := func() []bool {
		t.Helper()
		got, err := store.Driver().(outboxdriver.FeedOrderer).UnfinishedBefore(t.Context(),
			outboxdriver.UnfinishedBeforeParams{Topic: "orders", Rows: []outboxdriver.Row{a1, a2, b, c}})
		require.NoError(t, err)
		return got
	}
	// a2 follows a1, NEW; b has only itself, and the NEW b before c is
	// of another topic; c's aggregate has an earlier event only in
	// "billing".
	require.Equal(t, []bool{false, true, false, false}, ask())

	_, err = pool.Exec(t.Context(), `UPDATE outbox_event SET status = $2 WHERE event_id = $1`, a1.ID, int16(outbox.StatusDone))
	require.NoError(t, err)
	require.Equal(t, []bool{false, false, false, false}, ask(), "a1 is DONE")
	for _, status := range []outbox.Status{outbox.StatusRetry, outbox.StatusDead} {
		_, err = pool.Exec(t.Context(), `UPDATE outbox_event SET status = $2 WHERE event_id = $1`, a1.ID, int16(status))
		require.NoError(t, err)
		require.Equal(t, []bool{false, true, false, false}, ask(), "a1 is %s", status)
	}
}

// LeaseFirst leases the events that are NEW, under no running lease and
// first of their aggregate not DONE, and only those.
func TestLeaseFirst(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	event := func(aggregate string) outbox.Envelope {
		e := outbox.NewJSON("OrderCreated", []byte(`{}`))
		e.Topic, e.AggregateType, e.AggregateID = "orders", "Order", aggregate
		return e
	}
	ids := commit(t, store, event("a"), event("a"), event("b"), event("c"))
	a1, a2, b, c := ids[0], ids[1], ids[2], ids[3]
	orderer := store.Driver().(outboxdriver.FeedOrderer)
	now := time.Now()
	lease := func(ids ...string) []string {
		t.Helper()
		rows, err := orderer.LeaseFirst(t.Context(), outboxdriver.LeaseFirstParams{Owner: "relay", Topic: "orders", IDs: ids,
			Now: now, LockedUntil: now.Add(time.Minute)})
		require.NoError(t, err)
		var leased []string
		for _, r := range rows {
			require.Equal(t, "relay", r.LockedBy)
			require.Positive(t, r.Seq)
			leased = append(leased, r.ID)
		}
		return leased
	}
	_, err = pool.Exec(t.Context(), `UPDATE outbox_event SET locked_by = 'other', locked_until = $2 WHERE event_id = $1`,
		c, now.Add(time.Minute))
	require.NoError(t, err)
	// a2 waits for a1; c is another relay's claim.
	require.ElementsMatch(t, []string{b}, lease(a2, b, c))
	require.Empty(t, lease(b), "b is leased now")

	_, err = pool.Exec(t.Context(), `UPDATE outbox_event SET status = 1 WHERE event_id = $1`, a1)
	require.NoError(t, err)
	require.Equal(t, []string{a2}, lease(a2), "a1 is DONE")
	_, err = pool.Exec(t.Context(), `UPDATE outbox_event SET locked_until = $2 WHERE event_id = $1`, c, now.Add(-time.Second))
	require.NoError(t, err)
	require.Equal(t, []string{c}, lease(c), "the other relay's lease ran out")
}

// A claim of named aggregates takes none of their rows past the bounds it
// is given, with runs or without.
func TestClaimOfNamedAggregatesStopsAtTheirBounds(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	event := func() outbox.Envelope {
		e := outbox.NewJSON("OrderCreated", []byte(`{}`))
		e.Topic, e.AggregateType, e.AggregateID = "orders", "Order", "a"
		return e
	}
	ids := commit(t, store, event(), event(), event(), event())
	seqs := make([]int64, len(ids))
	for i, id := range ids {
		r, _, err := store.Driver().Get(t.Context(), id)
		require.NoError(t, err)
		seqs[i] = r.Seq
	}
	claim := func(owner string, bound int64, runs int) []string {
		t.Helper()
		p := storetest.ClaimParams(owner, "orders", 10, time.Now())
		p.Ordered, p.Aggregates, p.AggregateBounds = true, []outboxdriver.Aggregate{{Topic: "orders", Type: "Order", ID: "a"}}, []int64{bound}
		p.RunLength, p.RunRows = runs, 10
		return claimIDs(t, store, p)
	}
	require.Empty(t, claim("r1", seqs[0]-1, 1), "the head lies past the bound")
	require.Equal(t, ids[:3], claim("r1", seqs[2], 10), "the run stops at the bound")
	_, err = pool.Exec(t.Context(), `UPDATE outbox_event SET status = 1 WHERE event_id = ANY($1)`, ids[:3])
	require.NoError(t, err)
	require.Empty(t, claim("r2", seqs[2], 1), "the next head lies past the bound")
	require.Equal(t, ids[3:], claim("r2", seqs[3], 1))
}
