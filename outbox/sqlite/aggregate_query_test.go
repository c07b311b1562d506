package sqlite_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
)

// The query of an aggregate's events reads the partial aggregate index,
// from its start or from a cursor, with a topic or without, and sorts
// nothing.
func TestAggregateQueryReadsTheAggregateIndex(t *testing.T) {
	t.Parallel()
	db, store, writer := storeWithWriter(t, nil)
	events := storetest.AggregatePlanEvents(1000)
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
		_, err := writer.Write(ctx, tx, events...)
		return err
	}))
	_, err := db.ExecContext(t.Context(), `ANALYZE`)
	require.NoError(t, err)

	for _, topic := range []any{nil, "orders"} {
		for _, before := range []bool{false, true} {
			args := []any{storetest.PlanAggregate, "Order", topic, 10}
			if before {
				args = append(args, time.Now().UnixMicro(), "x")
			}
			text := strings.Join(queryPlan(t, db, sqlite.AggregateStatement(store, before), args), "\n")
			want := "SEARCH outbox_event USING INDEX outbox_event_agg_time_idx (aggregate_id=? AND aggregate_type=?"
			if before {
				want += " AND (created_at,event_id)<(?,?))"
			}
			require.Contains(t, text, want, "topic %v, before %v", topic, before)
			require.NotContains(t, text, "TEMP B-TREE", text)
		}
	}
}

// queryPlan returns the details of EXPLAIN QUERY PLAN of query with args.
func queryPlan(t *testing.T, db *sql.DB, query string, args []any) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
	require.NoError(t, err)
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
		plan = append(plan, detail)
	}
	require.NoError(t, rows.Err())
	return plan
}
