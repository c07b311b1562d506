package postgres_test

import (
	"testing"

	"github.com/stretchr/testify/require"

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
		got, err := store.Driver().(outboxdriver.UnfinishedReader).UnfinishedBefore(t.Context(),
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
