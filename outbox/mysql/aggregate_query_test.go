package mysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/internal/testmysql"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
)

// The query of an aggregate's events reads the aggregate index, from its
// start or from a cursor, with a topic or without, in its order (no
// filesort), rather than the ordered claims' index, which also starts
// with the topic and the aggregate: with the parameters sent apart, and
// with them interpolated into the statement, where the server sees the
// topic as a constant.
func TestAggregateQueryReadsTheAggregateIndex(t *testing.T) {
	t.Parallel()
	dsn, err := mysqldriver.ParseDSN(testmysql.DSN(t))
	require.NoError(t, err)
	db, err := testmysql.Open(dsn.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	dsn.InterpolateParams = true
	interpolated, err := testmysql.Open(dsn.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, interpolated.Close()) })
	store, err := mysql.NewStore(db, mysql.Config{})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
		_, err := writer.Write(ctx, tx, storetest.AggregatePlanEvents(1000)...)
		return err
	}))
	_, err = db.ExecContext(t.Context(), `ANALYZE TABLE outbox_event`)
	require.NoError(t, err)

	for _, conn := range []*sql.DB{db, interpolated} {
		for _, topic := range []any{nil, "orders"} {
			for _, before := range []bool{false, true} {
				args := []any{storetest.PlanAggregate, "Order", topic, topic}
				if before {
					at := time.Now().UnixMicro()
					args = append(args, at, at, "x")
				}
				plan := explain(t, conn, mysql.AggregateStatement(store, before), append(args, 10)...)
				require.Len(t, plan, 1)
				require.Equal(t, "outbox_event_agg_time_idx", plan[0]["key"], "topic %v, before %v: %v", topic, before, plan)
				require.NotContains(t, plan[0]["Extra"], "filesort", "topic %v, before %v: %v", topic, before, plan)
			}
		}
	}
}

// explain returns the rows of EXPLAIN query, each by column name.
func explain(t *testing.T, db *sql.DB, query string, args ...any) []map[string]string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "EXPLAIN "+query, args...)
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var plan []map[string]string
	for rows.Next() {
		values := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range values {
			ptrs[i] = &values[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		row := make(map[string]string, len(cols))
		for i, c := range cols {
			row[c] = values[i].String
		}
		plan = append(plan, row)
	}
	require.NoError(t, rows.Err())
	return plan
}
