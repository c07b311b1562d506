package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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

// TestStore runs the conformance suite of the stores, each test on a
// database of its own, in each of the queryModes, with the transactions
// of pgx and with those of InTx, which send events with the statement
// after them; and, with InTx, with JSON payloads written to payload_doc
// (Config.JSONPayloadColumn).
func TestStore(t *testing.T) {
	t.Parallel()
	pgxBegin := func(ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, error) { return pool.Begin(ctx) }
	for _, mode := range queryModes {
		for _, c := range []struct {
			name  string
			begin func(ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, error)
			cfg   postgres.Config
		}{
			{"pgx", pgxBegin, postgres.Config{}},
			{"InTx", postgres.BeginPipeline, postgres.Config{}},
			{"InTx/JSONPayloadColumn", postgres.BeginPipeline, postgres.Config{JSONPayloadColumn: true}},
		} {
			t.Run(mode.String()+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				runConformance(t, mode, c.begin, c.cfg)
			})
		}
	}
}

// queryModes are pgx's default query mode and the two in which pgx
// encodes parameters without learning their types from the server, as
// pools behind PgBouncer are set up.
var queryModes = []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}

// runConformance runs the suite on stores configured as cfg, with
// transactions from begin.
func runConformance(t *testing.T, mode pgx.QueryExecMode, begin func(ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, error), cfg postgres.Config) {
	storetest.Run(t, func(t *testing.T) storetest.Harness[pgx.Tx] {
		pool := testdb.NewInMode(t, mode)
		clock := clocktest.New(storetest.Start)
		keep, del := cfg, cfg // copies: the suite's tests run in parallel
		keep.Clock, del.Clock, del.DeleteDone = clock, clock, true
		store, err := postgres.NewStore(pool, keep)
		require.NoError(t, err)
		deleteDone, err := postgres.NewStore(pool, del)
		require.NoError(t, err)
		return storetest.Harness[pgx.Tx]{
			Store:      store,
			DeleteDone: deleteDone,
			Clock:      clock,
			Tx: storetest.TxFuncs[pgx.Tx]{
				Begin:    func(ctx context.Context) (pgx.Tx, error) { return begin(ctx, pool) },
				Commit:   func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) },
				Rollback: func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) },
			},
			Exec: func(ctx context.Context, tx pgx.Tx, sql string) error {
				_, err := tx.Exec(ctx, sql)
				return err
			},
			Count: func(t *testing.T) int {
				var n int
				require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event`).Scan(&n))
				return n
			},
			CorruptHeaders: func(t *testing.T, id string) {
				tag, err := pool.Exec(t.Context(), `UPDATE outbox_event SET headers = '{"a": 1}' WHERE event_id = $1`, id)
				require.NoError(t, err)
				require.EqualValues(t, 1, tag.RowsAffected())
			},
			Blocked: func(t *testing.T) bool {
				var n int
				require.NoError(t, pool.QueryRow(t.Context(), `
SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
				return n > 0
			},
		}
	})
}

// An InTx on a transaction is a savepoint. When its context ends as its
// function returns, it fails and the savepoint is rolled back, so that the
// enclosing transaction, which may go on without it, does not commit what
// it wrote: pgx would send no RELEASE, and leave the savepoint's writes in.
func TestSavepointWhoseContextEndedIsRolledBack(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	var savepointErr error
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		optional, cancel := context.WithCancel(ctx) // a deadline on an optional step
		savepointErr = savepoint(t, tx).InTx(optional, func(ctx context.Context, sp pgx.Tx) error {
			_, err := writer.Write(ctx, sp, storetest.JSONEvent(1))
			cancel() // the deadline passes as the step returns
			return err
		})
		return nil // the transaction goes on without the optional step
	}))
	require.ErrorIs(t, savepointErr, context.Canceled)
	var rows int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event`).Scan(&rows))
	require.Zero(t, rows, "the failed savepoint's event was committed")
}

// PostgreSQL tells from the rows' xmin where a write with hot events
// went, so that a writer looks up only those made in a savepoint: one
// event or several, through the transaction itself or with a savepoint
// open on it. The mark is the savepoint's subtransaction, whose status
// Kept asks for.
func TestInsertMarksWritesInASavepoint(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	var ids []string
	insert := func(n int) uint64 {
		now := time.Now()
		p := &outboxdriver.InsertParams{Rows: insertRows(n, now), Now: now, Owner: "relay", LockedUntil: now.Add(time.Minute), Mark: true}
		ids = nil
		for i := range (n + 1) / 2 { // the hot ones, written claimed
			p.Rows[i].Claimed = true
			ids = append(ids, p.Rows[i].ID)
		}
		res, err := store.Driver().Insert(t.Context(), tx, p)
		require.NoError(t, err)
		return res.Savepoint
	}
	require.Zero(t, insert(1))
	require.Zero(t, insert(3))
	sp, err := tx.Begin(t.Context())
	require.NoError(t, err)
	one := insert(1)
	require.NotZero(t, one, "written through the transaction, into its savepoint")
	var xmin uint64
	require.NoError(t, tx.QueryRow(t.Context(), `SELECT xmin::text::bigint FROM outbox_event WHERE event_id = $1`, ids[0]).Scan(&xmin))
	require.Equal(t, xmin, one, "the subtransaction's id (this server is in its first epoch)")
	require.Equal(t, one, insert(3), "one subtransaction")
	kept, err := store.Driver().Kept(t.Context(), tx, one, ids)
	require.NoError(t, err)
	require.Equal(t, ids, kept)
	require.NoError(t, sp.Commit(t.Context()))
	require.Zero(t, insert(1), "the savepoint released")
	kept, err = store.Driver().Kept(t.Context(), tx, one, []string{"a", "b"})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, kept, "released into the transaction")
}

// The savepoint mark widens a row's 32-bit xmin to the 64-bit id of its
// subtransaction with the epoch of the top-level transaction's id, plus one
// when the subtransaction's id wrapped around past it. A test server stays
// in its first epoch, so the expression runs here on given ids.
func TestSavepointMarkAcrossEpochs(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	const epoch = uint64(1) << 32
	for name, tc := range map[string]struct {
		xmin     uint32
		topLevel uint64
		want     uint64
	}{
		"top level":                  {xmin: 100, topLevel: 100, want: 0},
		"top level, later epoch":     {xmin: 100, topLevel: 5*epoch + 100, want: 0},
		"first epoch":                {xmin: 150, topLevel: 100, want: 150},
		"later epoch":                {xmin: 150, topLevel: 5*epoch + 100, want: 5*epoch + 150},
		"wrapped past the top level": {xmin: 3, topLevel: 5*epoch + epoch - 10, want: 6*epoch + 3},
		"last id before the wrap":    {xmin: 4294967295, topLevel: 5*epoch + 4294967290, want: 5*epoch + 4294967295},
	} {
		expr := strings.NewReplacer("xmin", fmt.Sprintf("'%d'::xid", tc.xmin),
			"pg_current_xact_id()", fmt.Sprintf("'%d'::xid8", tc.topLevel)).Replace(postgres.SavepointMark)
		var mark uint64
		require.NoError(t, pool.QueryRow(t.Context(), "SELECT "+expr).Scan(&mark), name)
		require.Equal(t, tc.want, mark, name)
	}
}

// insertRows returns n rows of JSONEvent as the engine prepares them,
// written and due at now.
func insertRows(n int, now time.Time) []outboxdriver.InsertRow {
	rows := make([]outboxdriver.InsertRow, n)
	for i := range rows {
		e := storetest.JSONEvent(i)
		rows[i] = outboxdriver.InsertRow{ID: outbox.NewID(), Type: string(e.Type), Topic: string(e.Type),
			AggregateType: string(outbox.GlobalAggregate), Payload: e.PayloadJSON, PayloadJSON: true, OccurredAt: now, AvailableAt: now}
	}
	return rows
}

// savepoint returns a store on tx, whose InTx opens a savepoint in it.
func savepoint(t *testing.T, tx pgx.Tx) *postgres.Store {
	t.Helper()
	store, err := postgres.NewStore(tx, postgres.Config{})
	require.NoError(t, err)
	return store
}

// hotRecorder is a hot path that takes every event, written claimed by
// its owner.
type hotRecorder struct{ storetest.HotPath }

func newHotRecorder() *hotRecorder { return &hotRecorder{storetest.HotPath{Owner: "relay"}} }

// delivered returns "id payload" of each event handed over.
func (h *hotRecorder) delivered() []string {
	var got []string
	for _, e := range h.Delivered() {
		got = append(got, e.ID+" "+string(e.Payload()))
	}
	return got
}

func named(id, payload string) outbox.Envelope {
	e := outbox.NewBytes("Named", []byte(payload))
	e.ID = id
	return e
}

// Event ids are the caller's to choose (a Watermill message keeps its
// UUID). A row with the id of an event rolled back with its savepoint,
// written again by this transaction or committed by another, is not that
// event's: the hot path takes only the events of writes kept.
func TestHotPathTakesOnlyKeptWritesOfAnID(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	hot := newHotRecorder()
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{HotPath: hot})
	require.NoError(t, err)
	write := func(ctx context.Context, tx pgx.Tx, e outbox.Envelope) {
		_, err := writer.Write(ctx, tx, e)
		require.NoError(t, err)
	}
	rolledBack := func(ctx context.Context, tx pgx.Tx, e outbox.Envelope) {
		sp, err := tx.Begin(ctx)
		require.NoError(t, err)
		write(ctx, tx, e)
		require.NoError(t, sp.Rollback(ctx))
	}
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		rolledBack(ctx, tx, named("x", "rolled back"))
		write(ctx, tx, named("x", "written again"))
		rolledBack(ctx, tx, named("y", "rolled back"))
		require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, other pgx.Tx) error {
			_, err := writer.Write(ctx, other, named("y", "the other transaction's"))
			return err
		}))
		return nil
	}))
	require.Equal(t, []string{"y the other transaction's", "x written again"}, hot.delivered())
}

// The check reads no table: serializable transactions that write events
// in savepoints do not conflict with one another through it.
func TestHotPathCheckAddsNoSerializationConflict(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{HotPath: newHotRecorder()})
	require.NoError(t, err)
	inSavepoint := func(w *outbox.Writer[pgx.Tx], id string) func(ctx context.Context, tx pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL SERIALIZABLE`); err != nil {
				return err
			}
			return savepoint(t, tx).InTx(ctx, func(ctx context.Context, sp pgx.Tx) error {
				_, err := w.Write(ctx, sp, named(id, id))
				return err
			})
		}
	}
	// A and C check and then wait before their commits (a slow disk, say)
	// while D writes and commits.
	start := func(id string) (goOn func(), result chan error) {
		checked, proceed, result := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		goOn = sync.OnceFunc(func() { close(proceed) })
		t.Cleanup(goOn) // a failed test lets it commit too
		pausing, err := outbox.NewStore[pgx.Tx](&pausingDriver{Driver: store.Driver(), checked: checked, goOn: proceed}, outbox.StoreConfig{})
		require.NoError(t, err)
		w, err := outbox.NewWriter(pausing, outbox.WriterConfig{HotPath: newHotRecorder()})
		require.NoError(t, err)
		go func() { result <- store.InTx(t.Context(), inSavepoint(w, id)) }()
		select {
		case <-checked:
		case err := <-result:
			t.Fatalf("%s ended without the savepoint check: %v", id, err)
		}
		return goOn, result
	}
	goOnA, resultA := start("a")
	goOnC, resultC := start("c")
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL SERIALIZABLE`); err != nil {
			return err
		}
		_, err := writer.Write(ctx, tx, named("d", "d"))
		return err
	}))
	goOnC()
	require.NoError(t, <-resultC)
	goOnA()
	require.NoError(t, <-resultA)
}

// pausingDriver is a driver whose Kept, once done, waits for goOn.
type pausingDriver struct {
	outboxdriver.Driver[pgx.Tx]
	checked, goOn chan struct{}
}

func (d *pausingDriver) Kept(ctx context.Context, tx pgx.Tx, savepoint uint64, ids []string) ([]string, error) {
	kept, err := d.Driver.Kept(ctx, tx, savepoint, ids)
	close(d.checked)
	<-d.goOn
	return kept, err
}

// A role that may only insert into the outbox table writes events that
// no hot path in its process takes (a writing service whose relays run
// elsewhere): only a hot write reads the rows' xmin.
func TestInsertOnlyRoleWritesColdEvents(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	var role string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT 'wmoutbox_insert_only_' || pg_backend_pid()`).Scan(&role))
	_, err = pool.Exec(t.Context(), `CREATE ROLE `+role)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP OWNED BY `+role+`; DROP ROLE `+role) })
	_, err = pool.Exec(t.Context(), `GRANT INSERT ON outbox_event TO `+role)
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+role); err != nil {
			return err
		}
		_, err := writer.Write(ctx, tx, named("x", "written"), named("y", "written"))
		return err
	}))
}

// TestConcurrentClaimersGetDisjointSets runs 8 claimers, each on its own
// connection, against 10,000 due rows at the same time.
//
// Ordered claims walk the same first events of each aggregate at once,
// and lock them by ctid: one that another claimer committed first is not
// claimed twice. (The events have no aggregate id: each is the first of
// its own.)
func TestConcurrentClaimersGetDisjointSets(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprint("ordered=", ordered), func(t *testing.T) {
			t.Parallel()
			claimConcurrently(t, ordered)
		})
	}
}

func claimConcurrently(t *testing.T, ordered bool) {
	const rows, claimers = 10000, 8
	url := testdb.URL(t)
	ctx := t.Context()
	conns := make([]*pgx.Conn, claimers)
	for i := range conns {
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		conns[i] = conn
	}
	writerStore, err := postgres.NewStore(conns[0], postgres.Config{})
	require.NoError(t, err)
	written := writeEvents(t, writerStore, rows)

	claims := make([]storetest.Claimer, claimers)
	for i := range claims {
		store, err := postgres.NewStore(conns[i], postgres.Config{})
		require.NoError(t, err)
		claims[i] = storetest.Claimer{Driver: store.Driver(), Params: outboxdriver.ClaimParams{
			Owner: fmt.Sprint("claimer-", i), Limit: 100, Topic: "orders", Ordered: ordered,
		}}
	}
	storetest.ClaimConcurrently(t, claims, written, nil)
}

func TestConfigRejectsBadIdentifiers(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	for _, cfg := range []postgres.Config{
		{Table: `outbox"; DROP TABLE outbox_event; --`},
		{Table: "Outbox"},
		{Schema: "public; DROP", Table: "x"},
		{Table: strings.Repeat("a", 49)},
	} {
		_, err := postgres.NewStore(pool, cfg)
		require.ErrorIs(t, err, postgres.ErrInvalidIdentifier, "%+v", cfg)
		require.ErrorIs(t, postgres.Migrate(t.Context(), pool, cfg), postgres.ErrInvalidIdentifier)
	}
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event`).Scan(&n))
}

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	for _, mode := range queryModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			migrateConcurrently(t, testdb.NewInMode(t, mode))
		})
	}
}

func migrateConcurrently(t *testing.T, pool *pgxpool.Pool) {
	ctx := t.Context()
	// The template is migrated already: a second run is a no-op.
	require.NoError(t, postgres.Migrate(ctx, pool, postgres.Config{}))

	_, err := pool.Exec(ctx, `CREATE SCHEMA billing`)
	require.NoError(t, err)
	cfg := postgres.Config{Schema: "billing", Table: "events"}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = postgres.Migrate(ctx, pool, cfg) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	var versions int
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT count(*) FROM billing.wmoutbox_migration WHERE table_name = 'events'`).Scan(&versions))
	migrations, err := postgres.Migrations(cfg)
	require.NoError(t, err)
	require.Equal(t, len(migrations), versions, "each migration recorded once")

	clock := clocktest.New(storetest.Start)
	store, err := postgres.NewStore(pool, postgres.Config{Schema: "billing", Table: "events", Clock: clock})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, storetest.JSONEvent(1))
		return err
	}))
	require.Len(t, claimIDs(t, store, storetest.ClaimParams("me", "OrderCreated", 100, clock.Now())), 1)
	var inDefault int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox_event`).Scan(&inDefault))
	require.Zero(t, inDefault, "the configured table is used, not the default one")
}

func TestMigrateTxInCallerTransaction(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := t.Context()
	cfg := postgres.Config{Table: "rolled_back"}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, postgres.MigrateTx(ctx, tx, cfg))
	require.NoError(t, tx.Rollback(ctx))
	var exists bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass('rolled_back') IS NOT NULL`).Scan(&exists))
	require.False(t, exists, "MigrateTx leaves the commit to the caller")
}

// The relay's bookkeeping does not wait for the WAL flush unless
// SynchronousBookkeeping says so; the business transaction is never
// touched. A store on a pool runs each statement in a transaction of its
// own, which hides what the statement set; here the store runs on a handle
// that sends every statement into one transaction without being a pgx.Tx,
// so that the setting each statement leaves can be read.
func TestBookkeepingCommitsAsynchronouslyUnlessAsked(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	for _, synchronous := range []bool{false, true} {
		tx := beginWithEvent(t, pool)
		store, err := postgres.NewStore(struct{ postgres.DB }{tx}, postgres.Config{SynchronousBookkeeping: synchronous})
		require.NoError(t, err)
		require.Equal(t, "on", synchronousCommit(t, tx), "inserts commit as the caller's transaction does")
		require.Len(t, claimIDs(t, store, storetest.ClaimParams("relay", "OrderCreated", 100, time.Now())), 1)
		want := map[bool]string{false: "off", true: "on"}[synchronous]
		require.Equal(t, want, synchronousCommit(t, tx), "after a claim")
	}
}

// A store on the caller's pgx.Tx shares its transaction, where a setting
// lasts until the end: its bookkeeping waits for the disk, so that the
// caller's commit does.
func TestBookkeepingInTheCallersTransactionLeavesItDurable(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	tx := beginWithEvent(t, pool)
	store, err := postgres.NewStore(tx, postgres.Config{})
	require.NoError(t, err)
	claimed := claimIDs(t, store, storetest.ClaimParams("relay", "OrderCreated", 100, time.Now()))
	require.Len(t, claimed, 1)
	n, err := store.Driver().Release(t.Context(), outboxdriver.ReleaseParams{Owner: "relay", IDs: claimed})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.EqualValues(t, 1, markDone(t, store, time.Now(), claimed...))
	require.Equal(t, "on", synchronousCommit(t, tx), "after a claim, a release and an outcome")
}

// beginWithEvent begins a transaction on pool and inserts one due event in
// it; the transaction is rolled back at cleanup.
func beginWithEvent(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	now := time.Now()
	_, err = store.Driver().Insert(t.Context(), tx, &outboxdriver.InsertParams{Rows: insertRows(1, now), Now: now})
	require.NoError(t, err)
	return tx
}

func synchronousCommit(t *testing.T, tx pgx.Tx) string {
	t.Helper()
	var s string
	require.NoError(t, tx.QueryRow(t.Context(), `SHOW synchronous_commit`).Scan(&s))
	return s
}

// TestInfiniteTimesDoNotBreakTheBatch: PostgreSQL stores ±infinity in a
// timestamptz, which a hand or another program may write. Such a row comes
// back malformed (the relay marks it DEAD); the rows claimed with it come
// back whole, instead of the whole claim failing and staying claimed.
func TestInfiniteTimesDoNotBreakTheBatch(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	written := writeEvents(t, store, 3)
	_, err = pool.Exec(t.Context(), `UPDATE outbox_event SET occurred_at = 'infinity' WHERE event_id = $1`, written[1])
	require.NoError(t, err)

	claimed := storetest.Claim(t, store.Driver(), storetest.ClaimParams("me", "orders", 100, time.Now()))
	require.Equal(t, written, storetest.IDs(claimed))
	require.NoError(t, claimed[0].Malformed)
	require.EqualError(t, claimed[1].Malformed, "occurred_at is infinity, not a time")
	require.NoError(t, claimed[2].Malformed)
	e, err := store.Get(t.Context(), written[1])
	require.NoError(t, err)
	require.EqualError(t, e.Malformed, "occurred_at is infinity, not a time", "the store's event says why too")

	_, err = pool.Exec(t.Context(), `UPDATE outbox_event SET done_at = '-infinity' WHERE event_id = $1`, written[2])
	require.NoError(t, err)
	e, err = store.Get(t.Context(), written[2])
	require.NoError(t, err, "Get reports a malformed row in the event, not as an error")
	require.EqualError(t, e.Malformed, "done_at is -infinity, not a time")
}

// Migrations need READ COMMITTED: a migrator with one snapshot for its
// transaction would take it before waiting for the advisory lock and apply
// again what the migrator it waited for applied. Migrate begins its own
// transaction so whatever the server's default; MigrateTx refuses another
// level instead of failing half way.
func TestMigrateIsReadCommittedWhateverTheDefault(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cfg, err := pgx.ParseConfig(testdb.New(t).Config().ConnString())
	require.NoError(t, err)
	cfg.RuntimeParams["default_transaction_isolation"] = "serializable"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(context.Background())

	require.NoError(t, postgres.Migrate(ctx, conn, postgres.Config{}))

	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	err = postgres.MigrateTx(ctx, tx, postgres.Config{Table: "other"})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	require.ErrorContains(t, err, "not repeatable read")
}

// PostgreSQL runs READ UNCOMMITTED as READ COMMITTED: every statement takes
// a snapshot of its own, so a migrator that waited for the advisory lock
// sees what the one before it applied, and MigrateTx takes the transaction.
func TestMigrateTxAcceptsReadUncommitted(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := t.Context()
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadUncommitted})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	require.NoError(t, postgres.MigrateTx(ctx, tx, postgres.Config{Table: "other"}))
	require.NoError(t, tx.Commit(ctx))
	var exists bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass('other') IS NOT NULL`).Scan(&exists))
	require.True(t, exists)
}

// The migrations are recorded in wmoutbox_migration beside the outbox
// table: an outbox table of that name is refused up front, in any schema,
// rather than by Migrate's CREATE TABLE, or by every statement of a store
// pointed at the migration records.
func TestTableCannotBeTheMigrationTable(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	for _, cfg := range []postgres.Config{{Table: "wmoutbox_migration"}, {Schema: "public", Table: "wmoutbox_migration"}} {
		_, err := postgres.NewStore(pool, cfg)
		require.ErrorIs(t, err, postgres.ErrInvalidIdentifier, "%+v", cfg)
		require.ErrorIs(t, postgres.Migrate(t.Context(), pool, cfg), postgres.ErrInvalidIdentifier, "%+v", cfg)
		_, err = postgres.Migrations(cfg)
		require.ErrorIs(t, err, postgres.ErrInvalidIdentifier, "%+v", cfg)
	}
}

// A claim passes over rows another transaction holds locked (SKIP LOCKED)
// instead of waiting for it: relays claiming at once get disjoint events
// without taking turns, and a lock held for long (a row being claimed or
// updated by a slow transaction) holds no claim up.
func TestClaimPassesOverLockedRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{Clock: clocktest.New(storetest.Start)})
	require.NoError(t, err)
	written := writeEvents(t, store, 3)

	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, `SELECT 1 FROM outbox_event WHERE event_id = $1 FOR UPDATE`, written[0])
	require.NoError(t, err)

	p := storetest.ClaimParams("me", "orders", 10, storetest.Start)
	waitAtMost, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	events, err := store.Driver().Claim(waitAtMost, p)
	require.NoError(t, err, "the claim waited for the locked row")
	require.ElementsMatch(t, written[1:], storetest.IDs(events))

	require.NoError(t, holder.Rollback(ctx))
	require.Equal(t, written[:1], claimIDs(t, store, p), "the row once its lock is gone")
}

// TestPurgePassesOverLockedRows: rows another transaction holds locked do
// not make a purge wait; the batch they make short ends it, and the next
// purge, once they are free, deletes them.
func TestPurgePassesOverLockedRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)
	clock := clocktest.New(storetest.Start)
	store, err := postgres.NewStore(pool, postgres.Config{Clock: clock})
	require.NoError(t, err)
	written := writeEvents(t, store, 6)
	require.EqualValues(t, 6, markDone(t, store, clock.Now(), written...))
	clock.Advance(48 * time.Hour)

	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, `SELECT 1 FROM outbox_event WHERE event_id = ANY($1) FOR UPDATE`, written[:2])
	require.NoError(t, err)

	purge := outbox.PurgeRequest{OlderThan: 24 * time.Hour, BatchSize: 3}
	waitAtMost, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := store.Purge(waitAtMost, purge)
	require.NoError(t, err, "the purge waited for the locked rows")
	require.EqualValues(t, 4, n, "a full batch, then a short one of the last free row")
	require.NoError(t, holder.Rollback(ctx))

	n, err = store.Purge(ctx, purge)
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the rows that were locked")
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox_event`).Scan(&left))
	require.Zero(t, left)
}

// A savepoint rolled back runs its after-rollback hooks at once; one
// released hands them to the enclosing transaction, which runs them if
// it rolls back, and never once it commits.
func TestSavepointAfterRollbackHooks(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	var got []string
	record := func(name string) func(context.Context) error {
		return func(context.Context) error {
			got = append(got, name)
			return nil
		}
	}
	run := func(savepointErr, outerErr error) error {
		got = nil
		return store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			require.NoError(t, outbox.AfterRollback(ctx, record("outer")))
			err := savepoint(t, tx).InTx(ctx, func(ctx context.Context, sp pgx.Tx) error {
				require.NoError(t, outbox.AfterRollback(ctx, record("savepoint")))
				return savepointErr
			})
			require.ErrorIs(t, err, savepointErr)
			if savepointErr != nil {
				require.Equal(t, []string{"savepoint"}, got, "a savepoint rolled back runs its hooks at once")
			} else {
				require.Empty(t, got, "a savepoint released runs none")
			}
			return outerErr
		})
	}
	failed := errors.New("failed")

	require.NoError(t, run(failed, nil))
	require.Equal(t, []string{"savepoint"}, got, "the enclosing commit runs none")
	require.Error(t, run(failed, failed))
	require.Equal(t, []string{"savepoint", "outer"}, got, "the savepoint's hooks run once")
	require.NoError(t, run(nil, nil))
	require.Empty(t, got)
	require.Error(t, run(nil, failed))
	require.Equal(t, []string{"outer", "savepoint"}, got)
}
