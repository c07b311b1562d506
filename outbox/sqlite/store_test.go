package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
)

// openDB opens a migrated database in a file of the test's own, closed at
// cleanup.
func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "outbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	require.NoError(t, sqlite.Migrate(t.Context(), db, sqlite.Config{}))
	return db
}

// storeWithWriter returns a store on a new migrated database and a writer
// with no hot path on it, both on clock (nil: the system's).
func storeWithWriter(t *testing.T, clock outbox.Clock) (*sql.DB, *sqlite.Store, *outbox.Writer[*sql.Tx]) {
	t.Helper()
	db := openDB(t)
	store, err := sqlite.NewStore(db, sqlite.Config{Clock: clock})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	return db, store, writer
}

// now is the time as the table keeps it, to the microsecond: what a
// driver returns of the times it was given.
func now() time.Time { return time.Now().Truncate(time.Microsecond) }

func count(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT count(*) FROM `+table).Scan(&n))
	return n
}

// TestStore runs the conformance suite of the stores, each test on a
// database file of its own.
func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness[*sql.Tx] {
		db := openDB(t)
		return storetest.SQLHarness(t, db, func(clock outbox.Clock, deleteDone bool) (*outbox.Store[*sql.Tx], error) {
			return sqlite.NewStore(db, sqlite.Config{Clock: clock, DeleteDone: deleteDone})
		})
	})
}

// TestConcurrentClaimersGetDisjointSets runs 8 claimers of one topic on
// one *sql.DB (so on several connections) against 2,000 due rows at the
// same time.
func TestConcurrentClaimersGetDisjointSets(t *testing.T) {
	t.Parallel()
	const rows, claimers = 2000, 8
	_, store, writer := storeWithWriter(t, nil)
	ctx := t.Context()
	var written []string
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		written, err = writer.Write(ctx, tx, storetest.JSONEvents(rows, "orders")...)
		return err
	}))

	claims := make([]storetest.Claimer, claimers)
	for i := range claims {
		claims[i] = storetest.Claimer{Driver: store.Driver(),
			Params: outboxdriver.ClaimParams{Owner: fmt.Sprint("claimer-", i), Topic: "orders", Limit: 25}}
	}
	storetest.ClaimConcurrently(t, claims, written, nil)
}

// TestClaimersInSeveralProcessesGetDisjointSets runs claimers on four
// *sql.DB of one file, as four processes would: each its own queue of
// writers, so they meet on SQLite's lock alone. The databases are opened by
// hand, with deferred transactions (no _txlock): the claim does not rely on
// the DSN.
func TestClaimersInSeveralProcessesGetDisjointSets(t *testing.T) {
	t.Parallel()
	const rows, processes, perProcess = 2000, 4, 2
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "outbox.db")
	stores := make([]*sqlite.Store, processes)
	for i := range stores {
		// A long busy timeout: SQLite's busy handler polls, and a claimer
		// may miss the free lock a few times in a row.
		db, err := sql.Open(sqlite.DriverName, "file:"+path+"?_busy_timeout=60000&_journal_mode=WAL")
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, db.Close()) })
		if i == 0 {
			require.NoError(t, sqlite.Migrate(ctx, db, sqlite.Config{}))
		}
		stores[i], err = sqlite.NewStore(db, sqlite.Config{})
		require.NoError(t, err)
	}
	writer, err := outbox.NewWriter(stores[0], outbox.WriterConfig{})
	require.NoError(t, err)
	var written []string
	require.NoError(t, stores[0].InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		written, err = writer.Write(ctx, tx, storetest.JSONEvents(rows, "")...)
		return err
	}))

	claims := make([]storetest.Claimer, processes*perProcess)
	for i := range claims {
		claims[i] = storetest.Claimer{Driver: stores[i%processes].Driver(),
			Params: outboxdriver.ClaimParams{Owner: fmt.Sprint("claimer-", i), Topic: "OrderCreated", Limit: 50}}
	}
	// Across processes SQLite's lock is not fair: a claimer may wait out the
	// busy timeout, and tries again as the relay does.
	storetest.ClaimConcurrently(t, claims, written, func(err error) bool { return errors.Is(err, sqlite.ErrBusy) })
}

// TestWritersAndClaimersTakeTurns runs business transactions that read
// before they write alongside a relay's claims and outcomes, on one
// *sql.DB: none fails with SQLITE_BUSY, and every event is delivered once.
func TestWritersAndClaimersTakeTurns(t *testing.T) {
	t.Parallel()
	const writers, perWriter = 4, 50
	db, store, writer := storeWithWriter(t, nil)
	ctx := t.Context()
	_, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`)
	require.NoError(t, err)

	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		delivered = map[string]int{}
		writing   sync.WaitGroup
	)
	errs := make(chan error, writers+1)
	for w := range writers {
		writing.Add(1)
		wg.Go(func() {
			defer writing.Done()
			for i := range perWriter {
				err := store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
					var n int
					if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil {
						return err
					}
					id := fmt.Sprint(w, "-", i)
					if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, id); err != nil {
						return err
					}
					_, err := writer.Write(ctx, tx, storetest.JSONEvent(n))
					return err
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		done := make(chan struct{})
		go func() { writing.Wait(); close(done) }()
		for {
			at := time.Now()
			batch, err := store.Driver().Claim(ctx, &outboxdriver.ClaimParams{Owner: "relay", Topic: "OrderCreated",
				Now: at, CreatedBefore: at, LockedUntil: at.Add(time.Minute), Limit: 10})
			if err != nil {
				errs <- err
				return
			}
			ids := storetest.IDs(batch)
			_, err = store.Driver().MarkDone(ctx, outboxdriver.MarkDoneParams{Now: time.Now(), IDs: ids})
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			for _, e := range batch {
				delivered[e.ID]++
			}
			mu.Unlock()
			if len(batch) > 0 {
				continue
			}
			// Nothing due: a relay waits for its poll interval.
			select {
			case <-done:
				n, _, err := store.Backlog(ctx, "OrderCreated")
				if err != nil {
					errs <- err
					return
				}
				if n == 0 {
					return
				}
			case <-time.After(time.Millisecond):
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, delivered, writers*perWriter)
	for id, n := range delivered {
		require.Equal(t, 1, n, "event %s delivered once", id)
	}
	require.Equal(t, writers*perWriter, count(t, db, "orders"))
}

func TestConfigRejectsBadIdentifiers(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	for _, cfg := range []sqlite.Config{
		{Table: `outbox"; DROP TABLE outbox_event; --`},
		{Table: "Outbox"},
		{Table: "main.outbox"},
		{Table: "[outbox]"},
		{Table: "1outbox"},
		{Table: strings.Repeat("a", 49)},
	} {
		_, err := sqlite.NewStore(db, cfg)
		require.ErrorIs(t, err, sqlite.ErrInvalidIdentifier, "%+v", cfg)
		require.ErrorIs(t, sqlite.Migrate(t.Context(), db, cfg), sqlite.ErrInvalidIdentifier)
		_, err = sqlite.Migrations(cfg)
		require.ErrorIs(t, err, sqlite.ErrInvalidIdentifier)
	}
	require.Zero(t, count(t, db, "outbox_event"))
	_, err := sqlite.NewStore(nil, sqlite.Config{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	require.ErrorIs(t, sqlite.Migrate(t.Context(), nil, sqlite.Config{}), outbox.ErrInvalidRequest)
	require.ErrorIs(t, sqlite.MigrateTx(t.Context(), nil, sqlite.Config{}), outbox.ErrInvalidRequest)
	_, err = sqlite.NewStore(db, sqlite.Config{Table: strings.Repeat("a", 48)})
	require.NoError(t, err)
}

// The identifier errors name the package once, then what the name is for.
func TestIdentifierErrorTexts(t *testing.T) {
	t.Parallel()
	for table, text := range map[string]string{
		"Outbox":             `sqlite: invalid identifier: table "Outbox" may hold only a-z, 0-9 and _, and not start with a digit`,
		"":                   "",
		"sqlite_outbox":      `sqlite: invalid identifier: table "sqlite_outbox" starts with sqlite_, which a database keeps for itself`,
		"wmoutbox_migration": `sqlite: invalid identifier: table "wmoutbox_migration" is the name of the migration table`,
	} {
		_, err := sqlite.Migrations(sqlite.Config{Table: table})
		if text == "" {
			require.NoError(t, err, "the default table")
			continue
		}
		require.EqualError(t, err, text)
	}
}

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "outbox.db")
	cfg := sqlite.Config{Table: "events"}

	// Four processes starting together, each with its own *sql.DB.
	dbs := make([]*sql.DB, 4)
	for i := range dbs {
		db, err := sqlite.Open(ctx, path)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, db.Close()) })
		dbs[i] = db
	}
	var wg sync.WaitGroup
	errs := make([]error, len(dbs))
	for i, db := range dbs {
		wg.Go(func() { errs[i] = sqlite.Migrate(ctx, db, cfg) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	db := dbs[0]
	require.NoError(t, sqlite.Migrate(ctx, db, cfg), "a second run is a no-op")

	migrations, err := sqlite.Migrations(cfg)
	require.NoError(t, err)
	var versions int
	require.NoError(t, db.QueryRowContext(ctx,
		`SELECT count(*) FROM wmoutbox_migration WHERE table_name = 'events'`).Scan(&versions))
	require.Equal(t, len(migrations), versions, "each migration recorded once")

	// The default table is another table with its own version.
	require.NoError(t, sqlite.Migrate(ctx, db, sqlite.Config{}))
	require.NoError(t, sqlite.Migrate(ctx, db, sqlite.Config{}))
	require.Equal(t, 2*len(migrations), count(t, db, "wmoutbox_migration"))

	clock := clocktest.New(storetest.Start)
	store, err := sqlite.NewStore(db, sqlite.Config{Table: "events", Clock: clock})
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
}

func TestMigrateTxInCallerTransaction(t *testing.T) {
	t.Parallel()
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "outbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	ctx := t.Context()
	cfg := sqlite.Config{Table: "rolled_back"}

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, sqlite.MigrateTx(ctx, tx, cfg))
	require.NoError(t, tx.Rollback())
	var tables int
	require.NoError(t, db.QueryRowContext(ctx,
		`SELECT count(*) FROM sqlite_schema WHERE name IN ('rolled_back', 'wmoutbox_migration')`).Scan(&tables))
	require.Zero(t, tables, "MigrateTx leaves the commit to the caller")

	tx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, sqlite.MigrateTx(ctx, tx, cfg))
	require.NoError(t, tx.Commit())
	require.Zero(t, count(t, db, "rolled_back"))
}

func TestMigrateFailureRollsBackAndKeepsThePoolUsable(t *testing.T) {
	t.Parallel()
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "outbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	db.SetMaxOpenConns(1) // the connection Migrate used is the one reused below
	ctx := t.Context()

	// An index name the migration needs is taken: migration 1 fails.
	_, err = db.ExecContext(ctx, `CREATE TABLE other (x INTEGER); CREATE INDEX clash_due_idx ON other (x)`)
	require.NoError(t, err)
	require.Error(t, sqlite.Migrate(ctx, db, sqlite.Config{Table: "clash"}))
	var tables int
	require.NoError(t, db.QueryRowContext(ctx,
		`SELECT count(*) FROM sqlite_schema WHERE name IN ('clash', 'wmoutbox_migration')`).Scan(&tables))
	require.Zero(t, tables, "nothing of the failed migration is left")

	require.NoError(t, sqlite.Migrate(ctx, db, sqlite.Config{}), "the connection is not left inside a transaction")
	require.Zero(t, count(t, db, "outbox_event"))
}

// TestStoreWriteInsideInTxWaitsForIt: the transaction of InTx is the
// database's writer until it ends, so a store write made inside it waits
// (here until its context ends) and succeeds after the commit.
func TestStoreWriteInsideInTxWaitsForIt(t *testing.T) {
	t.Parallel()
	_, store, writer := storeWithWriter(t, nil)
	var ids []string
	err := store.InTx(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
		var err error
		ids, err = writer.Write(ctx, tx, storetest.JSONEvent(1))
		require.NoError(t, err)
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		_, err = store.Driver().Claim(short, storetest.ClaimParams("me", "OrderCreated", 100, now()))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		return nil
	})
	require.NoError(t, err)
	claimed := storetest.Claim(t, store.Driver(), storetest.ClaimParams("me", "OrderCreated", 100, now()))
	require.Equal(t, ids, storetest.IDs(claimed))
}

// A table that relays of an earlier version used is migrated with their
// claims in it: such a claim moved available_at to the end of its lease
// and has no locked_until, and it holds until then.
func TestUpgradeKeepsEarlierClaims(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := openDB(t) // its migration table is there
	cfg := sqlite.Config{Table: "upgraded_outbox"}
	migrations, err := sqlite.Migrations(cfg)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, migrations[0].SQL)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO wmoutbox_migration (table_name, version, name, applied_at) VALUES (?, 1, ?, 0)`,
		cfg.Table, migrations[0].Name)
	require.NoError(t, err)

	// As version 1 left them: one event due, one claimed by a relay whose
	// lease ends a minute from now.
	start := storetest.Start.UnixMicro()
	lease := time.Minute.Microseconds()
	_, err = db.ExecContext(ctx, `INSERT INTO upgraded_outbox (event_id, event_type, topic, payload, occurred_at,
		available_at, created_at, updated_at, locked_by, locked_at) VALUES
		('due', 'T', 'orders', x'00', ?1, ?1, ?1, ?1, NULL, NULL),
		('leased', 'T', 'orders', x'00', ?1, ?2, ?1, ?1, 'old-relay', ?1)`, start, start+lease)
	require.NoError(t, err)

	require.NoError(t, sqlite.Migrate(ctx, db, cfg))
	clock := clocktest.New(storetest.Start)
	cfg.Clock = clock
	store, err := sqlite.NewStore(db, cfg)
	require.NoError(t, err)
	storetest.CheckEarlierClaimHolds(t, store, clock)
}

// A row another writer stored with an event id that is not valid UTF-8
// (TEXT holds any bytes; such rows are read and claimed like any other) is
// settled like any other: released, recorded DEAD or DONE, found by id.
// JSON would have replaced the bad bytes, and no statement taking a list
// of ids would have matched the row: claimed again at every lease end.
func TestOutcomesReachRowsWithInvalidUTF8IDs(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	store, err := sqlite.NewStore(db, sqlite.Config{})
	require.NoError(t, err)
	ctx := t.Context()
	const id = "01J\xffFOREIGN"
	_, err = db.ExecContext(ctx, `INSERT INTO outbox_event (event_id, event_type, topic, payload, occurred_at,
		available_at, created_at, updated_at) VALUES (?1, 'T', 't', x'00', 0, 0, 0, 0)`, id)
	require.NoError(t, err)
	d := store.Driver()
	p := storetest.ClaimParams("relay", "t", 100, now())
	require.Equal(t, []string{id}, storetest.IDs(storetest.Claim(t, d, p)), "the row is claimed")

	n, err := d.Release(ctx, outboxdriver.ReleaseParams{Owner: "relay", IDs: []string{id}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "Release reaches the row")
	storetest.Claim(t, d, p)
	n, err = d.RecordOutcomes(ctx, outboxdriver.RecordOutcomesParams{Now: now(), Owner: "relay",
		Outcomes: []outboxdriver.Outcome{{ID: id, Status: int16(outbox.StatusDead), AttemptSpent: true, Error: "malformed"}}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "DEAD from the claiming relay is recorded")
	dead, err := store.CountDead(ctx, outbox.DeadFilter{IDs: []string{id}})
	require.NoError(t, err)
	require.EqualValues(t, 1, dead, "an operator finds the DEAD row by id")
	done := outboxdriver.MarkDoneParams{Now: now(), IDs: []string{id}}
	n, err = d.MarkDone(ctx, done)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "DONE is recorded")

	_, err = db.ExecContext(ctx, `UPDATE outbox_event SET status = 0`)
	require.NoError(t, err)
	deleting, err := sqlite.NewStore(db, sqlite.Config{DeleteDone: true})
	require.NoError(t, err)
	n, err = deleting.Driver().MarkDone(ctx, done)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "DeleteDone deletes the row")
}

// SQLite reserves names that start with "sqlite_": refused up front, as
// every invalid name is, not by Migrate's SQL.
func TestReservedTableNameIsInvalidIdentifier(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	cfg := sqlite.Config{Table: "sqlite_outbox"}
	_, err := sqlite.NewStore(db, cfg)
	require.ErrorIs(t, err, sqlite.ErrInvalidIdentifier, "NewStore accepts a name Migrate cannot create")
	require.ErrorIs(t, sqlite.Migrate(t.Context(), db, cfg), sqlite.ErrInvalidIdentifier)
}

// A *sql.Tx is safe for concurrent use, and so is the Writer: writes made
// in one transaction at once, some of them failing (a duplicate id), keep
// every row of those that succeed. Each insert runs in a savepoint of
// one name, and savepoints nest: interleaved, a failed write's undo rolled
// back rows of writes that had reported success.
func TestConcurrentWritesInOneTransactionKeepTheirRows(t *testing.T) {
	t.Parallel()
	db, store, writer := storeWithWriter(t, nil)
	duplicate := outbox.NewBytes("Named", []byte("duplicate"))
	duplicate.ID = "duplicate"
	var (
		mu      sync.Mutex
		written []string
	)
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
		_, err := writer.Write(ctx, tx, duplicate)
		require.NoError(t, err)
		var wg sync.WaitGroup
		wg.Go(func() {
			for range 200 {
				ids, err := writer.Write(ctx, tx, storetest.JSONEvent(1), storetest.JSONEvent(2))
				if err == nil {
					mu.Lock()
					written = append(written, ids...)
					mu.Unlock()
				}
			}
		})
		wg.Go(func() {
			for range 200 {
				_, err := writer.Write(ctx, tx, storetest.JSONEvent(3), duplicate)
				if !errors.Is(err, outbox.ErrDuplicateEvent) {
					panic(fmt.Sprintf("the duplicate was written: %v", err))
				}
			}
		})
		wg.Wait()
		return nil
	}))
	require.Len(t, written, 400)
	require.Equal(t, 401, count(t, db, "outbox_event"), "every write that succeeded, and none that failed")
}

// The migrations are recorded in wmoutbox_migration beside the outbox
// table: an outbox table of that name is refused up front, rather than by
// Migrate's CREATE TABLE, or by every statement of a store pointed at the
// migration records.
func TestTableCannotBeTheMigrationTable(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	cfg := sqlite.Config{Table: "wmoutbox_migration"}
	_, err := sqlite.NewStore(db, cfg)
	require.ErrorIs(t, err, sqlite.ErrInvalidIdentifier)
	require.ErrorIs(t, sqlite.Migrate(t.Context(), db, cfg), sqlite.ErrInvalidIdentifier)
	_, err = sqlite.Migrations(cfg)
	require.ErrorIs(t, err, sqlite.ErrInvalidIdentifier)
}

// An empty aggregate id (written by another program; this package writes
// NULL) reads back as none, and an ordered claim treats it so: such
// events are not ordered, as the relay, which sees no aggregate, assumes.
func TestOrderedClaimTreatsAnEmptyAggregateIDAsNone(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	store, err := sqlite.NewStore(db, sqlite.Config{})
	require.NoError(t, err)
	ctx := t.Context()
	for _, id := range []string{"e1", "e2"} {
		_, err = db.ExecContext(ctx, `INSERT INTO outbox_event (event_id, event_type, topic, aggregate_type, aggregate_id,
			payload, occurred_at, available_at, created_at, updated_at) VALUES (?1, 'T', 't', 'Order', '', x'00', 0, 0, 0, 0)`, id)
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

// A claim that waits in the write gate leases the rows until the end it
// was given, from which the relay that asked counts its lease (it hands an
// event to a handler only within the first half of the lease it knows),
// even when the claim took its turn later; and no other claimer gets them
// before that end. (The claim once counted the lease from when it took the
// rows, reading the clock after its turn; a driver reads no clock now.)
func TestClaimThatWaitedInTheGateLeasesUntilTheGivenEnd(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := clocktest.New(storetest.Start)
	_, store, writer := storeWithWriter(t, clock)
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := writer.Write(ctx, tx, storetest.JSONEvent(1))
		return err
	}))

	hold, held := make(chan struct{}), make(chan struct{})
	txDone := make(chan error, 1)
	go func() {
		txDone <- store.InTx(ctx, func(context.Context, *sql.Tx) error {
			close(held)
			<-hold
			return nil
		})
	}()
	<-held
	p := storetest.ClaimParams("a", "OrderCreated", 100, clock.Now())
	p.LockedUntil = clock.Now().Add(time.Minute)
	type result struct {
		rows []outboxdriver.Row
		err  error
	}
	claimed := make(chan result, 1)
	go func() {
		rows, err := store.Driver().Claim(ctx, p)
		claimed <- result{rows, err}
	}()
	time.Sleep(100 * time.Millisecond) // the claim waits in the gate (the test holds either way)
	clock.Advance(40 * time.Second)
	close(hold)
	require.NoError(t, <-txDone)
	r := <-claimed
	require.NoError(t, r.err)
	require.Len(t, r.rows, 1)
	require.True(t, p.LockedUntil.Equal(r.rows[0].LockedUntil), "leased until %v, not the %v asked", r.rows[0].LockedUntil, p.LockedUntil)

	other := func() []outboxdriver.Row {
		return storetest.Claim(t, store.Driver(), storetest.ClaimParams("b", "OrderCreated", 100, clock.Now()))
	}
	clock.Set(p.LockedUntil.Add(-time.Microsecond))
	require.Empty(t, other(), "the lease runs until its end")
	clock.Set(p.LockedUntil)
	require.Len(t, other(), 1, "and no longer")
}
