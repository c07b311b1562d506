package postgres_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// The query of an aggregate's events reads the aggregate index backwards,
// from its start or from a cursor, with a topic or without, and sorts
// nothing, for an aggregate with more events than a page. On a table
// this small the planner would rather scan it all, so the test turns
// sequential scans off: what it checks is that the index serves the
// statement, not the planner's costs.
func TestAggregateQueryReadsTheAggregateIndex(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	events := storetest.AggregatePlanEvents(1000)
	commit(t, store, events...)
	conn := planner(t, pool)
	_, err = conn.Exec(t.Context(), `SET enable_seqscan = off`)
	require.NoError(t, err)

	for _, topic := range []string{"", "orders"} {
		plan := strings.Join(explain(t, conn, postgres.AggregateStatement(store, false), storetest.PlanAggregate, "Order", topic, 10), "\n")
		requireAggregateIndexScan(t, plan)
		plan = strings.Join(explain(t, conn, postgres.AggregateStatement(store, true), storetest.PlanAggregate, "Order", topic, 10, time.Now(), "x"), "\n")
		requireAggregateIndexScan(t, plan)
		require.Regexp(t, `Index Cond: .*aggregate_type.* AND \(ROW\(created_at, \(?event_id`, plan, "the cursor is where the scan starts")
	}
}

func requireAggregateIndexScan(t *testing.T, plan string) {
	t.Helper()
	require.Contains(t, plan, "Index Scan Backward using outbox_event_agg_time_idx", plan)
	require.NotContains(t, plan, "Sort", plan)
}
