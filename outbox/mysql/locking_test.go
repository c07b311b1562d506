package mysql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/internal/testmysql"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// statusDead is the status code of a DEAD outcome.
const statusDead = int16(outbox.StatusDead)

// recordOutcomes records outcomes reported by owner, as a relay does, and
// checks that want rows changed.
func recordOutcomes(t *testing.T, store *mysql.Store, owner string, want int64, outcomes ...outboxdriver.Outcome) {
	t.Helper()
	n, err := store.Driver().RecordOutcomes(t.Context(), outboxdriver.RecordOutcomesParams{Now: time.Now(), Owner: owner, Outcomes: outcomes})
	require.NoError(t, err)
	require.Equal(t, want, n)
}

// pausingDB is a database whose connections, while it is armed, stop
// before the next statement that contains marker until the test lets it go
// on: a test stops a store call inside its transaction, at a known
// statement, and acts meanwhile from other connections. Tests only; at
// most one pause at a time.
type pausingDB struct {
	*sql.DB
	marker string

	mu      sync.Mutex
	conns   []any // the connection ids of its connections
	armed   bool
	reached chan struct{} // receives when the statement is reached
	resume  chan struct{} // closed to let it go on
}

func openPausing(t *testing.T, dsn, marker string) *pausingDB {
	t.Helper()
	cfg, err := mysqldriver.ParseDSN(dsn)
	require.NoError(t, err)
	connector, err := mysqldriver.NewConnector(cfg)
	require.NoError(t, err)
	p := &pausingDB{marker: marker}
	p.DB = sql.OpenDB(pausingConnector{connector, p})
	p.DB.SetMaxOpenConns(4)
	t.Cleanup(func() { _ = p.DB.Close() })
	return p
}

// arm makes the next statement with the marker pause: reached receives
// once it is reached, and resume (idempotent) lets it go on.
func (p *pausingDB) arm() (reached <-chan struct{}, resume func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = true
	p.reached = make(chan struct{}, 1)
	p.resume = make(chan struct{})
	var once sync.Once
	r := p.resume
	return p.reached, func() { once.Do(func() { close(r) }) }
}

func (p *pausingDB) before(ctx context.Context, query string) {
	if !strings.Contains(query, p.marker) {
		return
	}
	p.mu.Lock()
	if !p.armed {
		p.mu.Unlock()
		return
	}
	p.armed = false
	reached, resume := p.reached, p.resume
	p.mu.Unlock()
	reached <- struct{}{}
	select {
	case <-resume:
	case <-ctx.Done():
	}
}

type pausingConnector struct {
	driver.Connector
	p *pausingDB
}

// fullConn is what go-sql-driver's connections implement.
type fullConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ExecerContext
	driver.QueryerContext
	driver.ConnPrepareContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

func (c pausingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	full := conn.(fullConn)
	rows, err := full.QueryContext(ctx, "SELECT CONNECTION_ID()", nil)
	if err != nil {
		return nil, err
	}
	id := make([]driver.Value, 1)
	err = rows.Next(id)
	_ = rows.Close()
	if err != nil {
		return nil, err
	}
	c.p.mu.Lock()
	c.p.conns = append(c.p.conns, id[0])
	c.p.mu.Unlock()
	return &pausingConn{fullConn: full, p: c.p}, nil
}

// waitingForALock reports whether a transaction of one of p's connections
// waits for a row lock, as SHOW ENGINE INNODB STATUS tells (MariaDB's
// information_schema.innodb_trx leaves out a statement that has changed
// no row yet).
func (p *pausingDB) waitingForALock(t *testing.T) bool {
	t.Helper()
	p.mu.Lock()
	ids := append([]any(nil), p.conns...)
	p.mu.Unlock()
	var typ, name, status string
	require.NoError(t, p.QueryRowContext(t.Context(), "SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status))
	for _, trx := range strings.Split(status, "\n---TRANSACTION ")[1:] {
		if !strings.Contains(trx, "LOCK WAIT") {
			continue
		}
		for _, id := range ids {
			if strings.Contains(trx, fmt.Sprintf("thread id %v,", id)) {
				return true
			}
		}
	}
	return false
}

// pausingConn sees every statement first: ExecContext and QueryContext are
// called for each, before the driver answers driver.ErrSkip for one that
// it prepares.
type pausingConn struct {
	fullConn
	p *pausingDB
}

func (c *pausingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.p.before(ctx, query)
	return c.fullConn.ExecContext(ctx, query, args)
}

func (c *pausingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.p.before(ctx, query)
	return c.fullConn.QueryContext(ctx, query, args)
}

// await returns the value ch delivers, failing the test after a minute.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// TestDeadFilterOfBlankTopicOrTypeMatchesOnlyThose: a DeadFilter
// whose Topic or EventType is blank (" ") restricts to that topic or type,
// as on PostgreSQL, where a space does not equal the empty string. Before
// sqlDeadFilter took an unset value as NULL, it compared each with the
// empty string in the connection's collation, which pads with spaces
// (utf8mb4_general_ci): " " was taken as no filter, and ReplayDead
// replayed every DEAD event of every topic and type.
func TestDeadFilterOfBlankTopicOrTypeMatchesOnlyThose(t *testing.T) {
	t.Parallel()
	_, store, writer := storeWithWriter(t)
	ctx := t.Context()
	ids := writeEvents(t, store, writer, 2) // topic "orders", type OrderCreated
	recordOutcomes(t, store, "", 2, outboxdriver.Outcome{ID: ids[0], Status: statusDead, AttemptSpent: true},
		outboxdriver.Outcome{ID: ids[1], Status: statusDead, AttemptSpent: true})

	for _, f := range []outbox.DeadFilter{{Topic: " "}, {EventType: " "}, {Topic: "  "}} {
		n, err := store.ReplayDead(ctx, f)
		require.NoError(t, err)
		require.Zero(t, n, "ReplayDead(Topic %q, EventType %q) replayed events of other topics and types", f.Topic, f.EventType)
		n, err = store.CountDead(ctx, f)
		require.NoError(t, err)
		require.Zero(t, n, "CountDead(Topic %q, EventType %q)", f.Topic, f.EventType)
		dead, err := store.QueryDead(ctx, outbox.DeadQuery{DeadFilter: f})
		require.NoError(t, err)
		require.Empty(t, dead, "QueryDead(Topic %q, EventType %q)", f.Topic, f.EventType)
	}
}

// TestBlankAggregateAndTenantIDsAreKept: an aggregate id or tenant
// id of spaces is valid (outbox.Envelope.Validate) and must be stored as
// written, and the events of such an aggregate are ordered. Before the
// store passed NULL for an absent id, the insert compared them with the
// empty string (nullif) in a collation that pads with spaces, and stored
// NULL: the ids read back empty and the events were not ordered.
func TestBlankAggregateAndTenantIDsAreKept(t *testing.T) {
	t.Parallel()
	_, store, writer := storeWithWriter(t)
	ctx := t.Context()
	events := storetest.JSONEvents(2, "orders")
	for i := range events {
		events[i].AggregateType, events[i].AggregateID, events[i].TenantID = "Order", " ", "  "
	}
	var ids []string
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		ids, err = writer.Write(ctx, tx, events...)
		return err
	}))
	p := storetest.ClaimParams("relay", "orders", 100, now())
	p.Ordered = true
	claimed := storetest.Claim(t, store.Driver(), p)
	require.Equal(t, ids[:1], storetest.IDs(claimed), "an ordered claim takes the aggregate's first event alone")

	got, err := store.Get(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, " ", got.AggregateID, "aggregate id")
	require.Equal(t, "  ", got.TenantID, "tenant id")
}

// TestBlankOwnerAndErrorAreNotEmpty: outcomes from owner " " apply only
// to events " " claimed; owner "" is the one that holds no claim. And an
// outcome's error " " is stored; only "" keeps the previous last_error. Before sqlUpdateStatus took no owner and no error as NULL,
// it compared them with the empty string in collations that pad with
// spaces, where " " equals it.
func TestBlankOwnerAndErrorAreNotEmpty(t *testing.T) {
	t.Parallel()
	_, store, writer := storeWithWriter(t)
	ctx := t.Context()
	ids := writeEvents(t, store, writer, 2)

	retry := func(id, err string) outboxdriver.Outcome {
		return outboxdriver.Outcome{ID: id, Status: int16(outbox.StatusRetry), AttemptSpent: true, NextAt: time.Now(), Error: err}
	}
	t.Run("owner", func(t *testing.T) {
		recordOutcomes(t, store, " ", 0, retry(ids[0], "boom"))
		e, err := store.Get(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, outbox.StatusNew, e.Status)
		require.Zero(t, e.Attempts)
	})
	t.Run("error", func(t *testing.T) {
		recordOutcomes(t, store, "", 1, retry(ids[1], "first"))
		recordOutcomes(t, store, "", 1, retry(ids[1], " "))
		e, err := store.Get(ctx, ids[1])
		require.NoError(t, err)
		require.Equal(t, 2, e.Attempts)
		require.Equal(t, " ", e.LastError, "the second outcome's error")
	})
}

// TestPurgeProcessedPassesOverOpenConsumers: a consumer's open
// transaction that has just recorded an event (a handler still running)
// does not hold back the purge of old records, as on PostgreSQL, whose
// purge passes over locked rows (SKIP LOCKED). The purge used to be a plain
// DELETE ... LIMIT at REPEATABLE READ: its scan locked the records it read
// with next-key locks, the consumer's uncommitted record among them, and
// waited for that transaction (up to innodb_lock_wait_timeout, 50 s, then
// failed), holding gap locks that stopped other consumers' MarkProcessed
// meanwhile. It now picks its batch with SKIP LOCKED at READ COMMITTED.
func TestPurgeProcessedPassesOverOpenConsumers(t *testing.T) {
	t.Parallel()
	db := testmysql.New(t)
	clock := clocktest.New(storetest.Start)
	store, err := mysql.NewStore(db, mysql.Config{Clock: clock})
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for _, id := range []string{"old-1", "old-2"} {
			if _, err := store.MarkProcessed(ctx, tx, "billing", id); err != nil {
				return err
			}
		}
		return nil
	}))
	clock.Advance(48 * time.Hour)

	consumer, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = consumer.Rollback() }()
	first, err := store.MarkProcessed(ctx, consumer, "billing", "new")
	require.NoError(t, err)
	require.True(t, first)

	waitAtMost, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := store.PurgeProcessed(waitAtMost, 24*time.Hour)
	require.NoError(t, err, "the purge waited for the consumer's transaction")
	require.EqualValues(t, 2, n)
}

// TestClaimLocksOnlyWhatItTakes: a claim "leases up to p.Limit due rows".
// A claim stopped inside its transaction (before its lease is written)
// holds 3 of 20 due events; a concurrent claim must get 3 of the 17
// others, as on PostgreSQL. READ COMMITTED releases only the rows that
// fail the WHERE, not those the LIMIT drops: a claim whose locking read
// went through more due rows than it takes (a claim of several topics,
// which the due index does not give in due order, did, until such claims
// picked their rows without locking them first) held them all, and the
// concurrent claim skipped them and came back empty. A claim reads its
// topic's due rows in order through the due index and stops at its limit.
func TestClaimLocksOnlyWhatItTakes(t *testing.T) {
	t.Parallel()
	p := openPausing(t, testmysql.DSN(t), "SET o.locked_by = ?")
	store, err := mysql.NewStore(p.DB, mysql.Config{})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	ctx := t.Context()
	writeEvents(t, store, writer, 20)

	reached, resume := p.arm()
	defer resume()
	held := make(chan claimResult, 1)
	go func() {
		rows, err := store.Driver().Claim(ctx, storetest.ClaimParams("a", "orders", 3, now()))
		held <- claimResult{rows, err}
	}()
	await(t, reached, "the first claim's lease")

	other, err := store.Driver().Claim(ctx, storetest.ClaimParams("b", "orders", 3, now()))
	resume()
	r := await(t, held, "the first claim")
	require.NoError(t, r.err)
	require.Len(t, r.rows, 3)
	require.NoError(t, err)
	require.Len(t, other, 3, "17 due events were free, but the first claim held them all")
}

// claimResult is what a claim run in a goroutine returned.
type claimResult struct {
	rows []outboxdriver.Row
	err  error
}

// TestOutcomeDuringAClaimDoesNotDeadlock: a relay whose lease ran
// out reports its outcome (DONE) while another relay's claim is taking the
// event: the outcome waits for the claim to commit, then applies, and both
// succeed, as on PostgreSQL. The claim's SELECT ... FOR UPDATE locks the
// row through the due index and the primary key. Its lease used to find
// the row again through the event id index, whose entry the outcome's
// UPDATE had locked before it queued for the row: each waited for the
// other, and InnoDB killed one with a deadlock error. The lease now goes
// by primary key (sqlLease).
func TestOutcomeDuringAClaimDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	p := openPausing(t, testmysql.DSN(t), "SET o.locked_by = ?")
	clock := clocktest.New(storetest.Start)
	store, err := mysql.NewStore(p.DB, mysql.Config{Clock: clock})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	ctx := t.Context()
	id := writeEvents(t, store, writer, 1)[0]
	leased := func(owner string) *outboxdriver.ClaimParams {
		p := storetest.ClaimParams(owner, "orders", 100, clock.Now())
		p.LockedUntil = clock.Now().Add(time.Minute)
		return p
	}
	require.Len(t, storetest.Claim(t, store.Driver(), leased("slow")), 1)
	clock.Advance(2 * time.Minute) // slow's lease runs out

	reached, resume := p.arm()
	defer resume()
	claim := make(chan claimResult, 1)
	go func() {
		rows, err := store.Driver().Claim(ctx, leased("fast"))
		claim <- claimResult{rows, err}
	}()
	await(t, reached, "the claim's lease")

	outcome := make(chan error, 1)
	go func() {
		// slow's DONE, which applies whoever holds the event.
		_, err := store.Driver().MarkDone(ctx, outboxdriver.MarkDoneParams{Now: clock.Now(), IDs: []string{id}})
		outcome <- err
	}()
	// Let the claim go on once the outcome waits for its row lock.
	deadline := time.Now().Add(time.Minute)
	for !p.waitingForALock(t) {
		require.True(t, time.Now().Before(deadline), "the outcome never waited for the claim")
		select {
		case err := <-outcome:
			t.Fatalf("the outcome did not wait for the claim's lock: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	resume()

	r := await(t, claim, "the claim")
	err = await(t, outcome, "the outcome")
	require.NoError(t, r.err, "the claim")
	require.NoError(t, err, "the outcome")
	require.Equal(t, []string{id}, storetest.IDs(r.rows))
	e, err := store.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, outbox.StatusDone, e.Status)
}
