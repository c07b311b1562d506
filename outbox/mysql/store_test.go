package mysql_test

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/internal/testmysql"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// storeWithWriter returns a store on a new migrated database and a writer
// with no hot path on it.
func storeWithWriter(t *testing.T) (*sql.DB, *mysql.Store, *outbox.Writer[*sql.Tx]) {
	t.Helper()
	db := testmysql.New(t)
	store, err := mysql.NewStore(db, mysql.Config{})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	return db, store, writer
}

func count(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(t.Context(), "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

// TestStore runs the conformance suite of the stores, each test on a
// database of its own.
func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness[*sql.Tx] {
		db := testmysql.New(t)
		h := storetest.SQLHarness(t, db, func(clock outbox.Clock, deleteDone bool) (*outbox.Store[*sql.Tx], error) {
			return mysql.NewStore(db, mysql.Config{Clock: clock, DeleteDone: deleteDone})
		})
		// InnoDB refreshes what innodb_trx shows only when it was not read
		// for 0.1 s: poll it less often than that.
		h.Blocked = func(t *testing.T) bool {
			var n int
			require.NoError(t, db.QueryRowContext(t.Context(), `
SELECT count(*) FROM information_schema.innodb_trx AS t
JOIN information_schema.processlist AS p ON p.id = t.trx_mysql_thread_id
WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE()`).Scan(&n))
			return n > 0
		}
		return h
	})
}

// TestConcurrentClaimersGetDisjointSets runs 8 claimers of one topic on
// one *sql.DB (so on several connections) against 2,000 due rows at the
// same time.
func TestConcurrentClaimersGetDisjointSets(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprint("ordered=", ordered), func(t *testing.T) {
			t.Parallel()
			const rows, claimers = 2000, 8
			_, store, writer := storeWithWriter(t)
			written := writeEvents(t, store, writer, rows)
			claims := make([]storetest.Claimer, claimers)
			for i := range claims {
				claims[i] = storetest.Claimer{Driver: store.Driver(),
					Params: outboxdriver.ClaimParams{Owner: fmt.Sprint("claimer-", i), Topic: "orders", Limit: 25, Ordered: ordered}}
			}
			storetest.ClaimConcurrently(t, claims, written, nil)
		})
	}
}

// ReleaseOwned runs as every subscription with ReleaseEarlierClaims starts:
// its read goes through the due index to the topic's pending rows, not
// through the table's history of delivered events.
func TestReleaseOwnedReadsOnlyTheTopicsPendingRows(t *testing.T) {
	t.Parallel()
	db, store, writer := storeWithWriter(t)
	db.SetMaxOpenConns(1) // the statements run on the connection whose counters are read
	ctx := t.Context()
	const history = 3000
	ids := writeEvents(t, store, writer, history+2)
	markDone(t, store, ids[:history])
	claimed := storetest.Claim(t, store.Driver(), storetest.ClaimParams("me", "orders", 100, now()))
	require.Len(t, claimed, 2)
	_, err := db.ExecContext(ctx, "ANALYZE TABLE outbox_event")
	require.NoError(t, err)

	before := handlerReads(t, db)
	n, err := store.Driver().ReleaseOwned(ctx, outboxdriver.ReleaseOwnedParams{Owner: "me", Topic: "orders",
		ClaimedBefore: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Less(t, handlerReads(t, db)-before, int64(100), "rows and index entries read, with %d delivered events in the table", history)
}

// now is the time as the table keeps it, to the microsecond: what a
// driver returns of the times it was given.
func now() time.Time { return time.Now().Truncate(time.Microsecond) }

// markDone records the events of ids delivered, as a relay does.
func markDone(t *testing.T, store *mysql.Store, ids []string) {
	t.Helper()
	n, err := store.Driver().MarkDone(t.Context(), outboxdriver.MarkDoneParams{Now: time.Now(), IDs: ids})
	require.NoError(t, err)
	require.EqualValues(t, len(ids), n)
}
