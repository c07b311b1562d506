package mysql_test

import (
	"bytes"
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/internal/testmysql"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

func TestConfigRejectsBadIdentifiers(t *testing.T) {
	t.Parallel()
	db := testmysql.New(t)
	for _, cfg := range []mysql.Config{
		{Table: "outbox`; DROP TABLE outbox_event; --"},
		{Table: "Outbox"},
		{Table: "test.outbox"},
		{Table: "`outbox`"},
		{Table: "1outbox"},
		{Table: strings.Repeat("a", 49)},
		{Table: "wmoutbox_migration"},
	} {
		_, err := mysql.NewStore(db, cfg)
		require.ErrorIs(t, err, mysql.ErrInvalidIdentifier, "%+v", cfg)
		require.ErrorIs(t, mysql.Migrate(t.Context(), db, cfg), mysql.ErrInvalidIdentifier)
		_, err = mysql.Migrations(cfg)
		require.ErrorIs(t, err, mysql.ErrInvalidIdentifier)
	}
	require.Zero(t, count(t, db, "outbox_event"))
	_, err := mysql.NewStore(nil, mysql.Config{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	require.ErrorIs(t, mysql.Migrate(t.Context(), nil, mysql.Config{}), outbox.ErrInvalidRequest)
	_, err = mysql.NewStore(db, mysql.Config{Table: strings.Repeat("a", 48)})
	require.NoError(t, err)
}

// TestMigrateIsIdempotentAndConcurrent: four processes starting together
// apply each migration once, and a table of another name is a table of
// its own, with its own versions.
func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := testmysql.DSN(t)
	cfg := mysql.Config{Table: "events"}
	dbs := make([]*sql.DB, 4)
	for i := range dbs {
		db, err := testmysql.Open(dsn)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, db.Close()) })
		dbs[i] = db
	}
	var wg sync.WaitGroup
	errs := make([]error, len(dbs))
	for i, db := range dbs {
		wg.Go(func() { errs[i] = mysql.Migrate(ctx, db, cfg) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	db := dbs[0]
	require.NoError(t, mysql.Migrate(ctx, db, cfg), "a second run is a no-op")

	migrations, err := mysql.Migrations(cfg)
	require.NoError(t, err)
	var versions int
	require.NoError(t, db.QueryRowContext(ctx,
		`SELECT count(*) FROM wmoutbox_migration WHERE table_name = 'events'`).Scan(&versions))
	require.Equal(t, len(migrations), versions, "each migration recorded once")
	require.Equal(t, 2*len(migrations), count(t, db, "wmoutbox_migration"), "and the default table's, by testmysql")

	clock := clocktest.New(storetest.Start)
	store, err := mysql.NewStore(db, mysql.Config{Table: "events", Clock: clock})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := writer.Write(ctx, tx, storetest.JSONEvent(1))
		return err
	}))
	claimed := storetest.Claim(t, store.Driver(), storetest.ClaimParams("me", "OrderCreated", 100, clock.Now()))
	require.Len(t, claimed, 1)
	require.Zero(t, count(t, db, "outbox_event"), "the configured table is used, not the default one")
	require.Equal(t, 1, count(t, db, "events"))
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := store.MarkProcessed(ctx, tx, "consumer", claimed[0].ID)
		return err
	}))
	require.Equal(t, 1, count(t, db, "events_inbox"), "the inbox is named after the table")
}

// TestMigrationsAreRenderedForTheTable: the files name the default table;
// rendered for another, no name of the default table is left, and each
// statement runs on its own (the driver sends one at a time).
func TestMigrationsAreRenderedForTheTable(t *testing.T) {
	t.Parallel()
	migrations, err := mysql.Migrations(mysql.Config{Table: "shop_events"})
	require.NoError(t, err)
	require.Len(t, migrations, 4)
	for i, m := range migrations {
		require.Equal(t, i+1, m.Version)
		require.NotContains(t, m.SQL, "outbox_event", m.Name)
		require.Contains(t, m.SQL, "`shop_events")
	}
	require.Contains(t, migrations[0].SQL, "CREATE TABLE IF NOT EXISTS `shop_events`")
	require.Contains(t, migrations[1].SQL, "CREATE TABLE IF NOT EXISTS `shop_events_inbox`")
	require.Contains(t, migrations[2].SQL, "CREATE TABLE IF NOT EXISTS `shop_events_lease`")
	require.Contains(t, migrations[2].SQL, "ADD KEY `shop_events_dead_group_idx`")
}

// TestLargeBatchIsWrittenWholeOrNotAtAll: a batch of several statements
// (more than 1,000 events) whose last statement fails on a duplicate id
// leaves none of its rows in the transaction, which goes on and commits.
func TestLargeBatchIsWrittenWholeOrNotAtAll(t *testing.T) {
	t.Parallel()
	db, store, writer := storeWithWriter(t)
	ctx := t.Context()
	existing := outbox.NewBytes("Named", []byte("first"))
	existing.ID = "existing"
	_, err := writer.Write(ctx, nil, existing)
	require.ErrorIs(t, err, outbox.ErrNoTransaction)

	var kept []string
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := writer.Write(ctx, tx, existing); err != nil {
			return err
		}
		batch := storetest.JSONEvents(2500, "orders")
		batch[2200] = existing
		_, err := writer.Write(ctx, tx, batch...)
		require.ErrorIs(t, err, outbox.ErrDuplicateEvent)
		var inTx int
		require.NoError(t, tx.QueryRowContext(ctx, "SELECT count(*) FROM outbox_event").Scan(&inTx))
		require.Equal(t, 1, inTx, "the rows of the batch's first two statements are gone")

		kept, err = writer.Write(ctx, tx, storetest.JSONEvents(1500, "orders")...)
		return err
	}))
	require.Len(t, kept, 1500)
	require.Equal(t, 1501, count(t, db, "outbox_event"))
}

// TestBatchLargerThanAStatementKeepsEveryPayload: payloads that add up to
// more than one statement holds are split across statements and read back
// byte for byte.
func TestBatchLargerThanAStatementKeepsEveryPayload(t *testing.T) {
	t.Parallel()
	_, store, writer := storeWithWriter(t)
	ctx := t.Context()
	events := make([]outbox.Envelope, 7)
	for i := range events {
		events[i] = outbox.NewBytes("Blob", bytes.Repeat([]byte{byte(i), 0, 0xff}, outbox.MaxPayloadSize/3))
	}
	var ids []string
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		ids, err = writer.Write(ctx, tx, events...)
		return err
	}))
	for i, id := range ids {
		e, err := store.Get(ctx, id)
		require.NoError(t, err)
		require.True(t, bytes.Equal(events[i].PayloadBytes, e.PayloadBytes), "payload %d", i)
	}
}

// TestKeysCompareByteForByte: MySQL's _bin collations ignore trailing
// spaces, so that 'a' = 'a '; the table's keys are binary strings, and ids
// or topics that differ only there are two.
func TestKeysCompareByteForByte(t *testing.T) {
	t.Parallel()
	_, store, writer := storeWithWriter(t)
	ctx := t.Context()
	a, spaced := storetest.JSONEvent(1), storetest.JSONEvent(2)
	a.ID, spaced.ID = "same", "same "
	a.Topic, spaced.Topic = "orders", "orders "
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := writer.Write(ctx, tx, a, spaced)
		return err
	}))
	for _, e := range []outbox.Envelope{a, spaced} {
		claimed := storetest.Claim(t, store.Driver(), storetest.ClaimParams("me", e.Topic, 100, now()))
		require.Equal(t, []string{e.ID}, storetest.IDs(claimed), "topic %q", e.Topic)
		got, err := store.Get(ctx, e.ID)
		require.NoError(t, err)
		require.Equal(t, e.Topic, got.Topic)
	}
}

// TestClaimPassesOverLockedRows: a row another transaction holds does not
// make a claim wait, and is claimed once it is free.
func TestClaimPassesOverLockedRows(t *testing.T) {
	t.Parallel()
	db, store, writer := storeWithWriter(t)
	ctx := t.Context()
	written := writeEvents(t, store, writer, 3)

	holder, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	_, err = holder.ExecContext(ctx, `SELECT 1 FROM outbox_event WHERE event_id = ? FOR UPDATE`, written[0])
	require.NoError(t, err)

	p := storetest.ClaimParams("me", "orders", 10, now())
	waitAtMost, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, err := store.Driver().Claim(waitAtMost, p)
	require.NoError(t, err, "the claim waited for the locked row")
	require.ElementsMatch(t, written[1:], storetest.IDs(rows))

	require.NoError(t, holder.Rollback())
	require.Equal(t, written[:1], storetest.IDs(storetest.Claim(t, store.Driver(), p)), "the row once its lock is gone")
}

// TestPurgePassesOverLockedRows: rows another transaction holds locked do
// not make a purge wait; the batch they make short ends it, and the next
// purge, once they are free, deletes them.
func TestPurgePassesOverLockedRows(t *testing.T) {
	t.Parallel()
	db := testmysql.New(t)
	ctx := t.Context()
	clock := clocktest.New(storetest.Start)
	store, err := mysql.NewStore(db, mysql.Config{Clock: clock})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	written := writeEvents(t, store, writer, 6)
	n, err := store.Driver().MarkDone(ctx, outboxdriver.MarkDoneParams{Now: clock.Now(), IDs: written})
	require.NoError(t, err)
	require.EqualValues(t, 6, n)
	clock.Advance(48 * time.Hour)

	holder, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	_, err = holder.ExecContext(ctx, `SELECT 1 FROM outbox_event WHERE event_id IN (?, ?) FOR UPDATE`, written[0], written[1])
	require.NoError(t, err)

	purge := outbox.PurgeRequest{OlderThan: 24 * time.Hour, BatchSize: 3}
	waitAtMost, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err = store.Purge(waitAtMost, purge)
	require.NoError(t, err, "the purge waited for the locked rows")
	require.EqualValues(t, 4, n, "a full batch, then a short one of the last free row")
	require.NoError(t, holder.Rollback())

	n, err = store.Purge(ctx, purge)
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the rows that were locked")
	require.Zero(t, count(t, db, "outbox_event"))
}

// TestOrderedClaimReadsNoDoneHistory: the events of an aggregate with a
// long DONE history are claimed with a handful of index reads, not one per
// event of the aggregate: each probe of orderedHead reads one index entry.
// Counted with the server's handler counters, on the claim's own
// connection.
func TestOrderedClaimReadsNoDoneHistory(t *testing.T) {
	t.Parallel()
	db, store, writer := storeWithWriter(t)
	db.SetMaxOpenConns(1) // the claim runs on the connection whose counters are read
	ctx := t.Context()
	const history = 3000
	events := storetest.JSONEvents(history+2, "orders")
	for i := range events {
		events[i].AggregateType, events[i].AggregateID = "Order", "o-1"
	}
	var ids []string
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		ids, err = writer.Write(ctx, tx, events...)
		return err
	}))
	markDone(t, store, ids[:history])
	_, err := db.ExecContext(ctx, "ANALYZE TABLE outbox_event")
	require.NoError(t, err)

	p := storetest.ClaimParams("me", "orders", 100, now())
	p.Ordered = true
	before := handlerReads(t, db)
	claimed := storetest.Claim(t, store.Driver(), p)
	reads := handlerReads(t, db) - before
	require.Equal(t, []string{ids[history]}, storetest.IDs(claimed), "the first waiting event, alone")
	t.Logf("an ordered claim read %d rows and index entries", reads)
	require.Less(t, reads, int64(100), "the claim read the aggregate's DONE history")
}

// TestClaimCursorSkipsWhatLiesBehindIt: with a cursor (the position of the
// previous claim's last row, ClaimParams.After), a claim starts its scan
// after that row instead of passing over the rows in flight again.
func TestClaimCursorSkipsWhatLiesBehindIt(t *testing.T) {
	t.Parallel()
	db, store, writer := storeWithWriter(t)
	db.SetMaxOpenConns(1)
	ctx := t.Context()
	writeEvents(t, store, writer, 3000)
	_, err := db.ExecContext(ctx, "ANALYZE TABLE outbox_event")
	require.NoError(t, err)
	p := storetest.ClaimParams("me", "orders", 2900, now())
	p.After = storetest.SortClaimed(storetest.Claim(t, store.Driver(), p), false)
	p.Limit = 10

	before := handlerReads(t, db)
	claimed := storetest.Claim(t, store.Driver(), p)
	withCursor := handlerReads(t, db) - before
	require.Len(t, claimed, 10)

	p.After = nil
	before = handlerReads(t, db)
	claimed = storetest.Claim(t, store.Driver(), p)
	fromStart := handlerReads(t, db) - before
	require.Len(t, claimed, 10)
	t.Logf("index entries read: %d after the cursor, %d from the start", withCursor, fromStart)
	require.Less(t, withCursor, int64(100))
	require.Greater(t, fromStart, int64(2900), "from the start, the claim passes over the rows in flight")
}

// TestOrderedClaimTreatsAnEmptyAggregateIDAsNone: an empty aggregate id
// (written by another program; this package writes NULL) reads back as
// none, and an ordered claim treats it so.
func TestOrderedClaimTreatsAnEmptyAggregateIDAsNone(t *testing.T) {
	t.Parallel()
	db, store, _ := storeWithWriter(t)
	ctx := t.Context()
	for _, id := range []string{"e1", "e2"} {
		_, err := db.ExecContext(ctx, `INSERT INTO outbox_event (event_id, event_type, topic, aggregate_type, aggregate_id,
			payload, occurred_at, available_at, created_at, updated_at) VALUES (?, 'T', 't', 'Order', '', x'00', 0, 0, 0, 0)`, id)
		require.NoError(t, err)
	}
	p := storetest.ClaimParams("relay", "t", 100, now())
	p.Ordered = true
	claimed := storetest.Claim(t, store.Driver(), p)
	require.Equal(t, []string{"e1", "e2"}, storetest.IDs(claimed))
	for _, e := range claimed {
		require.Empty(t, e.AggregateID)
	}
}

// TestMigrateWaitsForAnotherMigrator: while another session holds the
// table's migration lock, Migrate waits, and applies the migrations once it
// is free.
func TestMigrateWaitsForAnotherMigrator(t *testing.T) {
	t.Parallel()
	db := testmysql.New(t)
	ctx := t.Context()
	holder, err := db.Conn(ctx)
	require.NoError(t, err)
	defer holder.Close()
	var got int
	require.NoError(t, holder.QueryRowContext(ctx, "SELECT GET_LOCK('wmoutbox:waiting', 0)").Scan(&got))
	require.Equal(t, 1, got)

	migrated := make(chan error, 1)
	go func() { migrated <- mysql.Migrate(ctx, db, mysql.Config{Table: "waiting"}) }()
	select {
	case err := <-migrated:
		t.Fatalf("Migrate returned while the lock was held: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	_, err = holder.ExecContext(ctx, "DO RELEASE_LOCK('wmoutbox:waiting')")
	require.NoError(t, err)
	require.NoError(t, <-migrated)
	require.Zero(t, count(t, db, "waiting"))
}

// handlerReads returns the index and table rows the session has read so
// far (the Handler_read_* counters).
func handlerReads(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "SHOW SESSION STATUS LIKE 'Handler_read%'")
	require.NoError(t, err)
	defer rows.Close()
	var total int64
	for rows.Next() {
		var name string
		var n int64
		require.NoError(t, rows.Scan(&name, &n))
		total += n
	}
	require.NoError(t, rows.Err())
	return total
}

// writeEvents commits n events on topic orders and returns their ids.
func writeEvents(t *testing.T, store *mysql.Store, writer *outbox.Writer[*sql.Tx], n int) []string {
	t.Helper()
	var ids []string
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
		var err error
		ids, err = writer.Write(ctx, tx, storetest.JSONEvents(n, "orders")...)
		return err
	}))
	return ids
}

// TestLockWaitTimeoutLeavesTheTransactionUsable: with
// innodb_rollback_on_timeout off (the default), a lock wait timeout rolls
// back the statement alone: the write fails with the timeout, not with
// ErrTransactionRolledBack, and the transaction, its earlier event
// included, goes on and commits.
func TestLockWaitTimeoutLeavesTheTransactionUsable(t *testing.T) {
	t.Parallel()
	db, store, writer := storeWithWriter(t)
	ctx := t.Context()
	var rollbackOnTimeout bool
	require.NoError(t, db.QueryRowContext(ctx, "SELECT @@innodb_rollback_on_timeout").Scan(&rollbackOnTimeout))
	if rollbackOnTimeout {
		t.Skip("the server rolls back the whole transaction on a lock wait timeout")
	}
	held := storetest.JSONEvent(1)
	held.ID = "held"
	holder, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	_, err = writer.Write(ctx, holder, held) // its uncommitted id makes another insert of it wait
	require.NoError(t, err)

	var before []string
	err = store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
			return err
		}
		var err error
		if before, err = writer.Write(ctx, tx, storetest.JSONEvent(2)); err != nil {
			return err
		}
		_, err = writer.Write(ctx, tx, held)
		require.Error(t, err)
		require.NotErrorIs(t, err, mysql.ErrTransactionRolledBack)
		require.ErrorContains(t, err, "Lock wait timeout")
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, holder.Rollback())
	got, err := store.Get(ctx, before[0])
	require.NoError(t, err, "the event written before the timeout is committed")
	require.Equal(t, outbox.StatusNew, got.Status)
}

// TestMigrationCutShortRunsAgain: a migration whose statements were
// applied but not recorded (a process stopped between the two) is applied
// again from its start: the latest migration's ALTER TABLE, which MySQL
// cannot write IF NOT EXISTS, finds its column and keys and goes on.
func TestMigrationCutShortRunsAgain(t *testing.T) {
	t.Parallel()
	db := testmysql.New(t)
	ctx := t.Context()
	migrations, err := mysql.Migrations(mysql.Config{})
	require.NoError(t, err)
	latest := migrations[len(migrations)-1].Version
	_, err = db.ExecContext(ctx, `DELETE FROM wmoutbox_migration WHERE table_name = 'outbox_event' AND version = ?`, latest)
	require.NoError(t, err)
	require.NoError(t, mysql.Migrate(ctx, db, mysql.Config{}))
	var versions int
	require.NoError(t, db.QueryRowContext(ctx,
		`SELECT count(*) FROM wmoutbox_migration WHERE table_name = 'outbox_event' AND version = ?`, latest).Scan(&versions))
	require.Equal(t, 1, versions)
}
