package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	modernc "modernc.org/sqlite" // registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/wmoutbox/wmoutbox/internal/ident"
	"github.com/wmoutbox/wmoutbox/internal/sqlcodec"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// DefaultTable is the outbox table's name when [Config.Table] is empty.
const DefaultTable = "outbox_event"

// Config configures a [Store]. The zero value is the default table in the
// main database.
type Config struct {
	// Table is the outbox table's name. Default [DefaultTable]. 1 to 48
	// characters of a-z, 0-9 and _, not starting with a digit, sqlite_ or
	// pg_, and not wmoutbox_migration, where [Migrate] records the
	// migrations; otherwise [ErrInvalidIdentifier].
	Table string
	// Clock stamps the times the store and its writers write (created,
	// updated, done, replayed) and the cutoff of purges; give a relay on
	// the store the same clock (SubscriberConfig.Clock), which decides
	// what is due. Default [outbox.SystemClock].
	Clock outbox.Clock
	// Logger receives after-commit hook failures of
	// [outbox.Store.InTx]. Default slog.Default().
	Logger *slog.Logger
	// DeleteDone deletes an event's row once it is delivered, instead of
	// keeping it with status DONE until an [outbox.Store.Purge]. Default
	// false. The table then holds only pending and DEAD events, and the
	// record of what was delivered and when (done_at) is gone. RETRY and
	// DEAD are recorded as always. Rows already DONE are left to Purge.
	DeleteDone bool
}

// Store is the SQLite outbox store on database/sql: an [outbox.Store] for
// *sql.Tx, made by [NewStore]. It is safe for concurrent use.
type Store = outbox.Store[*sql.Tx]

// driver runs the store's statements on db, its writes through db's
// gate: the [outboxdriver.Driver] of SQLite.
type driver struct {
	db   *sql.DB
	gate *gate
	t    *table
}

var _ outboxdriver.Driver[*sql.Tx] = (*driver)(nil)

// table is a validated table's names and the SQL rendered for it.
type table struct {
	sqlcodec.Table
	sql statements
}

func newTable(cfg Config) (*table, error) {
	names, err := sqlcodec.NewTable("sqlite", cmp.Or(cfg.Table, DefaultTable), ident.Quote, ErrInvalidIdentifier)
	if err != nil {
		return nil, err
	}
	t := &table{Table: names}
	t.sql = renderStatements(t.Quoted, t.Inbox, t.Lease, cfg.DeleteDone)
	return t, nil
}

// NewStore returns a store on db, a database opened with the "sqlite"
// driver of modernc.org/sqlite, best with [Open]. Claims, outcomes and
// operator queries run on db; events are written in the transactions
// given to an [outbox.Writer] or a Publisher. It does not touch the
// database: run [Migrate] first.
//
// The transaction [outbox.Store.InTx] begins is a writer: it queues with
// the store's writes on db in this process (those of every store on db),
// and holds the write lock until it ends (from BEGIN on a database from
// [Open], whose transactions are IMMEDIATE, which is what a transaction
// that reads before it writes needs). A store write made in its function
// on db (a claim, an outcome, a purge) waits for it, and fails with
// [ErrBusy]: write through its tx instead.
func NewStore(db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sqlite store needs a database", outbox.ErrInvalidRequest)
	}
	t, err := newTable(cfg)
	if err != nil {
		return nil, err
	}
	return outbox.NewStore[*sql.Tx](&driver{db: db, gate: gateOf(db), t: t}, outbox.StoreConfig{Clock: cfg.Clock, Logger: cfg.Logger})
}

// Begin implements [outboxdriver.Driver]: the transaction enters db's
// gate, which it leaves when it ends.
func (d *driver) Begin(ctx context.Context) (*sql.Tx, error) {
	if err := d.gate.enter(ctx, "begin"); err != nil {
		return nil, err
	}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		d.gate.leave()
		return nil, err
	}
	return tx, nil
}

// Commit implements [outboxdriver.Driver].
func (d *driver) Commit(_ context.Context, tx *sql.Tx) error {
	defer d.gate.leave()
	return tx.Commit()
}

// Rollback implements [outboxdriver.Driver].
func (d *driver) Rollback(_ context.Context, tx *sql.Tx) error {
	defer d.gate.leave()
	return tx.Rollback()
}

// Outer implements [outboxdriver.Driver]: nil, the store beginning
// transactions of its own.
func (d *driver) Outer() any { return nil }

// Insert implements [outboxdriver.Driver]: the rows are written in tx by
// one prepared statement, inside a savepoint, so that tx holds the whole
// batch or, when a row fails, none of it (SQLite, unlike PostgreSQL, keeps
// a transaction usable after a failed statement). Inserts in one
// transaction made at once run one after the other. A row skipped for its
// idempotency key costs a query for the event id holding the key; SQLite
// has one writer at a time, so that row is there to find.
//
// SQLite cannot tell whether a savepoint opened on tx (a SAVEPOINT
// statement) holds the rows, so with p.Mark Insert returns a mark for
// every write: the engine looks the rows up before the commit with Kept.
func (d *driver) Insert(ctx context.Context, tx *sql.Tx, p *outboxdriver.InsertParams) (outboxdriver.InsertResult, error) {
	if len(p.Rows) == 0 {
		return outboxdriver.InsertResult{}, nil
	}
	skipped, err := d.insert(ctx, tx, p)
	if err != nil {
		return outboxdriver.InsertResult{}, err
	}
	res := outboxdriver.InsertResult{Skipped: skipped}
	if p.Mark {
		res.Savepoint = 1
	}
	return res, nil
}

func (d *driver) insert(ctx context.Context, tx *sql.Tx, p *outboxdriver.InsertParams) (skipped []outboxdriver.SkippedRow, err error) {
	defer inserting.lock(tx)()
	if _, err := tx.ExecContext(ctx, sqlInsertSavepoint); err != nil {
		return nil, fmt.Errorf("sqlite: insert into %s: %w", d.t.Name, d.notMigrated(err))
	}
	// undo undoes the rows written so far; its statements fail only when
	// the transaction is gone, which the caller learns from err, or from
	// its next statement.
	undo := func() {
		_, _ = tx.ExecContext(context.WithoutCancel(ctx), sqlInsertUndo)
		_, _ = tx.ExecContext(context.WithoutCancel(ctx), sqlInsertRelease)
	}
	defer func() {
		if err != nil {
			undo()
		}
	}()
	stmt, err := tx.PrepareContext(ctx, d.t.sql.insert)
	if err != nil {
		return nil, fmt.Errorf("sqlite: insert into %s: %w", d.t.Name, d.notMigrated(err))
	}
	defer stmt.Close()
	for i := range p.Rows {
		r := &p.Rows[i]
		values, _ := sqlcodec.InsertValues(r, p)
		res, err := stmt.ExecContext(ctx, values...)
		if isUniqueViolation(err) {
			return nil, fmt.Errorf("sqlite: insert into %s: %w: %w", d.t.Name, outbox.ErrDuplicateEvent, err)
		}
		var n int64
		if err == nil {
			n, err = res.RowsAffected()
		}
		if err == nil && n == 0 {
			var holder string
			err = tx.QueryRowContext(ctx, d.t.sql.keyHolder, r.Topic, r.IdempotencyKey).Scan(&holder)
			skipped = append(skipped, outboxdriver.SkippedRow{Index: i, ExistingID: holder})
		}
		if err != nil {
			return nil, fmt.Errorf("sqlite: insert into %s: %w", d.t.Name, d.notMigrated(err))
		}
	}
	if len(skipped) > 0 && p.RejectDuplicateKeys {
		undo()
		return skipped, nil
	}
	if _, err := tx.ExecContext(ctx, sqlInsertRelease); err != nil {
		return nil, fmt.Errorf("sqlite: insert into %s: %w", d.t.Name, d.notMigrated(err))
	}
	return skipped, nil
}

// inserting serializes the inserts made in one transaction, which a
// *sql.Tx lets goroutines make at once: savepoints nest, so that of two
// inserts in one transaction at once, one's savepoint would end the
// other's, and its undo roll back the other's rows.
var inserting = txLocks{locks: make(map[*sql.Tx]*txLock)}

// txLocks holds a lock for each transaction in use, while it is.
type txLocks struct {
	mu    sync.Mutex
	locks map[*sql.Tx]*txLock
}

// txLock is a transaction's lock, with the number of its holders and
// waiters.
type txLock struct {
	sync.Mutex
	users int
}

// lock locks tx and returns the function that unlocks it.
func (l *txLocks) lock(tx *sql.Tx) (unlock func()) {
	l.mu.Lock()
	t := l.locks[tx]
	if t == nil {
		t = &txLock{}
		l.locks[tx] = t
	}
	t.users++
	l.mu.Unlock()
	t.Lock()
	return func() {
		t.Unlock()
		l.mu.Lock()
		defer l.mu.Unlock()
		if t.users--; t.users == 0 {
			delete(l.locks, tx)
		}
	}
}

// Kept implements [outboxdriver.Driver]: those of ids that have a row, one
// query by primary key. An id written again after its savepoint rolled
// back counts as kept, the row being the later write's: give events ids
// of their own, as the [outbox.Writer] does, when you roll back to
// savepoints and write again.
func (d *driver) Kept(ctx context.Context, tx *sql.Tx, _ uint64, ids []string) ([]string, error) {
	return sqlcodec.Existing(ctx, tx, d.t.Label, d.t.sql.existingOne, d.t.sql.existing, ids)
}

// Get implements [outboxdriver.Executor].
func (d *driver) Get(ctx context.Context, id string) (outboxdriver.Row, bool, error) {
	return sqlcodec.Get(ctx, d.db, d.t.Label, d.t.sql.get, id)
}

// Claim implements [outboxdriver.Executor]. SQLite has no FOR UPDATE SKIP
// LOCKED and needs none: it lets one writer at a time, and the claim is
// one write statement, so it holds the write lock before it reads which
// rows are due. Claimers take turns (in db's gate, then waiting up to the
// busy timeout), and each sees the leases of the ones before. p.After is
// ignored: an SQLite index holds no entries for the rows' earlier
// versions, so a claim has nothing to skip. An ordered claim takes the
// earliest due rows that wait for no earlier one of their aggregate, and
// ignores p.Aggregates.
func (d *driver) Claim(ctx context.Context, p *outboxdriver.ClaimParams) ([]outboxdriver.Row, error) {
	if err := d.gate.enter(ctx, "claim"); err != nil {
		return nil, err
	}
	defer d.gate.leave()
	if p.Ordered && p.RunLength > 1 {
		rows, err := d.claimRuns(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("sqlite: claim: %w", d.notMigrated(err))
		}
		return rows, nil
	}
	query := d.t.sql.claim[0]
	if p.Ordered {
		query = d.t.sql.claim[1]
	}
	rows, err := sqlcodec.QueryRows(ctx, d.db, query, sqlcodec.Micros(p.Now), sqlcodec.Micros(p.CreatedBefore), p.Limit,
		p.Owner, sqlcodec.Micros(p.LockedUntil), p.Topic)
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim: %w", d.notMigrated(err))
	}
	return rows, nil
}

// claimRuns is Claim with runs, in one transaction, which its first
// statement, the claim of the heads, makes a writer: it holds SQLite's
// write lock throughout. Each head's next events are one read of the
// aggregate index.
func (d *driver) claimRuns(ctx context.Context, p *outboxdriver.ClaimParams) ([]outboxdriver.Row, error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }() // a no-op after the commit
	args := []any{sqlcodec.Micros(p.Now), sqlcodec.Micros(p.CreatedBefore), p.Limit, p.Owner, sqlcodec.Micros(p.LockedUntil), p.Topic}
	rows, err := tx.QueryContext(ctx, d.t.sql.claimHeads, args...) //nolint:rowserrcheck // ScanRowsWithKeys checks rows.Err and closes rows
	if err != nil {
		return nil, err
	}
	heads, rowids, err := sqlcodec.ScanRowsWithKeys(rows)
	if err != nil {
		return nil, err
	}
	after := make([][]*outboxdriver.Row, len(heads))
	for i, h := range heads {
		if h.AggregateID == "" {
			continue
		}
		next, err := sqlcodec.QueryRows(ctx, tx, d.t.sql.runAfter, h.Topic, h.AggregateType, h.AggregateID, rowids[i], p.RunLength-1)
		if err != nil {
			return nil, err
		}
		for j := range next {
			after[i] = append(after[i], &next[j])
		}
	}
	followers := sqlcodec.Runs(p, heads, after)
	if len(followers) > 0 {
		ids := make([]string, len(followers))
		for i := range followers {
			ids[i] = followers[i].ID
		}
		if _, err := tx.ExecContext(ctx, d.t.sql.leaseRun, sqlcodec.HexIDs(ids), p.Owner, sqlcodec.Micros(p.Now),
			sqlcodec.Micros(p.LockedUntil)); err != nil {
			return nil, fmt.Errorf("record the lease: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	lockedAt, lockedUntil := sqlcodec.Stored(p.Now), sqlcodec.Stored(p.LockedUntil)
	for i := range followers {
		f := &followers[i]
		f.LockedBy, f.LockedAt, f.LockedUntil = p.Owner, lockedAt, lockedUntil
	}
	return append(heads, followers...), nil
}

// Release implements [outboxdriver.Executor].
func (d *driver) Release(ctx context.Context, p outboxdriver.ReleaseParams) (int64, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	return d.exec(ctx, fmt.Sprintf("release %d claims", len(p.IDs)), d.t.sql.release, sqlcodec.HexIDs(p.IDs), p.Owner)
}

// ReleaseOwned implements [outboxdriver.Executor], in one statement.
func (d *driver) ReleaseOwned(ctx context.Context, p outboxdriver.ReleaseOwnedParams) (int64, error) {
	return d.exec(ctx, fmt.Sprintf("release the claims of %s on %s", p.Owner, p.Topic), d.t.sql.releaseOwned,
		p.Topic, p.Owner, sqlcodec.Micros(p.ClaimedBefore))
}

// MarkDone implements [outboxdriver.Executor] in one statement, deleting
// the rows under [Config.DeleteDone].
func (d *driver) MarkDone(ctx context.Context, p outboxdriver.MarkDoneParams) (int64, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	query, args := d.t.sql.markDone, []any{sqlcodec.HexIDs(p.IDs), sqlcodec.Micros(p.Now)}
	if d.t.sql.deleteDone != "" {
		query, args = d.t.sql.deleteDone, []any{sqlcodec.HexIDs(p.IDs)}
	}
	return d.exec(ctx, fmt.Sprintf("record %d events done", len(p.IDs)), query, args...)
}

// RecordOutcomes implements [outboxdriver.Executor] in one statement.
func (d *driver) RecordOutcomes(ctx context.Context, p outboxdriver.RecordOutcomesParams) (int64, error) {
	if len(p.Outcomes) == 0 {
		return 0, nil
	}
	return d.exec(ctx, fmt.Sprintf("update status of %d events", len(p.Outcomes)), d.t.sql.updateStatus,
		sqlcodec.Micros(p.Now), sqlcodec.Outcomes(p.Outcomes), p.Owner)
}

// QueryDead implements [outboxdriver.Executor].
func (d *driver) QueryDead(ctx context.Context, p outboxdriver.QueryDeadParams) ([]outboxdriver.Row, error) {
	rows, err := sqlcodec.QueryRows(ctx, d.db, d.t.sql.queryDead, append(sqlcodec.DeadFilter(p.Filter), p.After, p.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: query dead events: %w", err)
	}
	return rows, nil
}

// CountDead implements [outboxdriver.Executor].
func (d *driver) CountDead(ctx context.Context, f outboxdriver.DeadFilter) (int64, error) {
	var n int64
	if err := d.db.QueryRowContext(ctx, d.t.sql.countDead, sqlcodec.DeadFilter(f)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: count dead events: %w", err)
	}
	return n, nil
}

// ReplayDead implements [outboxdriver.Executor].
func (d *driver) ReplayDead(ctx context.Context, p outboxdriver.ReplayDeadParams) (int64, error) {
	return d.exec(ctx, "replay dead events", d.t.sql.replayDead, append(sqlcodec.DeadFilter(p.Filter), sqlcodec.Micros(p.Now))...)
}

// Backlog implements [outboxdriver.Executor].
func (d *driver) Backlog(ctx context.Context, topic string) (int64, time.Time, error) {
	return sqlcodec.Backlog(ctx, d.db, d.t.Label, d.t.sql.backlog, topic)
}

// PurgeBatch implements [outboxdriver.Executor] in one statement, which
// is its own transaction.
func (d *driver) PurgeBatch(ctx context.Context, p outboxdriver.PurgeParams) (int64, error) {
	statuses, err := json.Marshal(p.Statuses)
	if err != nil {
		return 0, fmt.Errorf("sqlite: purge %s: %w", d.t.Name, err)
	}
	return d.exec(ctx, "purge "+d.t.Name, d.t.sql.purge, string(statuses), sqlcodec.Micros(p.Before), p.Limit)
}

// PurgeDeadBatch implements [outboxdriver.Executor]; SQLite has one
// writer at a time, so that no row of the batch is another's.
func (d *driver) PurgeDeadBatch(ctx context.Context, p outboxdriver.PurgeDeadParams) (int64, error) {
	return d.exec(ctx, "purge dead events of "+d.t.Name, d.t.sql.purgeDead, append(sqlcodec.DeadFilter(p.Filter), p.Limit)...)
}

// DeadGroups implements [outboxdriver.Executor]: the groups, then their
// topics.
func (d *driver) DeadGroups(ctx context.Context, p outboxdriver.DeadGroupsParams) ([]outboxdriver.DeadGroup, error) {
	filter := sqlcodec.DeadFilter(p.Filter)
	return sqlcodec.DeadGroups(ctx, d.db, d.t.Label, d.t.sql.deadGroups, append(filter, p.Limit), d.t.sql.deadGroupTopics, filter)
}

// Stats implements [outboxdriver.Executor] in three statements: the
// counts, the claims and the heartbeats.
func (d *driver) Stats(ctx context.Context, p outboxdriver.StatsParams) (outboxdriver.StatsResult, error) {
	now := []any{sqlcodec.Micros(p.Now)}
	if p.PendingOnly {
		return sqlcodec.Stats(ctx, d.db, d.t.Label, d.t.sql.statsPending, now, "", nil)
	}
	res, err := sqlcodec.Stats(ctx, d.db, d.t.Label, d.t.sql.statsTopics, now, d.t.sql.statsClaims, now)
	if err != nil {
		return res, err
	}
	res.Relays, err = sqlcodec.Relays(ctx, d.db, d.t.Label, d.t.sql.statsRelays)
	return res, err
}

// QueryPending implements [outboxdriver.Executor].
func (d *driver) QueryPending(ctx context.Context, p outboxdriver.QueryPendingParams) ([]outboxdriver.Row, error) {
	statuses, err := json.Marshal(p.Statuses)
	if err == nil {
		var rows []outboxdriver.Row
		rows, err = sqlcodec.QueryRows(ctx, d.db, d.t.sql.queryPending, string(statuses), sqlcodec.NullIfEmpty(p.Topic), p.After, p.Limit)
		if err == nil {
			return rows, nil
		}
	}
	return nil, fmt.Errorf("sqlite: query pending events: %w", err)
}

// QueryEvents implements [outboxdriver.Executor].
func (d *driver) QueryEvents(ctx context.Context, p outboxdriver.QueryEventsParams) ([]outboxdriver.Row, error) {
	rows, err := sqlcodec.QueryRows(ctx, d.db, d.t.sql.queryEvents, p.After, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: query events: %w", err)
	}
	return rows, nil
}

// QueryAggregate implements [outboxdriver.Executor].
func (d *driver) QueryAggregate(ctx context.Context, p outboxdriver.QueryAggregateParams) ([]outboxdriver.Row, error) {
	query, args := d.t.sql.queryAggregate, []any{p.ID, p.Type, sqlcodec.NullIfEmpty(p.Topic), p.Limit}
	if p.Before != nil {
		query, args = d.t.sql.queryAggregateBefore, append(args, sqlcodec.Micros(p.Before.CreatedAt), p.Before.ID)
	}
	rows, err := sqlcodec.QueryRows(ctx, d.db, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: query aggregate: %w", err)
	}
	return rows, nil
}

// AcquireLease implements [outboxdriver.Executor] in one statement, which
// changes the lease's row when p.Owner holds it.
func (d *driver) AcquireLease(ctx context.Context, p outboxdriver.LeaseParams) (bool, error) {
	n, err := d.exec(ctx, "lease "+p.Name, d.t.sql.acquireLease, p.Name, p.Owner, sqlcodec.Micros(p.Now), sqlcodec.Micros(p.Until))
	return n == 1, err
}

// Heartbeat implements [outboxdriver.Executor]: a renewal, and an insert
// when it found no row, together through the gate.
func (d *driver) Heartbeat(ctx context.Context, p outboxdriver.HeartbeatParams) (existed bool, err error) {
	name, until := outboxdriver.HeartbeatName(p.Owner), sqlcodec.Micros(p.Until)
	err = d.gate.write(ctx, "heartbeat", func() error {
		res, err := d.db.ExecContext(ctx, d.t.sql.heartbeatRenew, name, p.Owner, until)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil || n > 0 {
			existed = n > 0
			return err
		}
		_, err = d.db.ExecContext(ctx, d.t.sql.heartbeatInsert, name, p.Owner, until)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("sqlite: heartbeat of %s: %w", p.Owner, d.notMigrated(err))
	}
	return existed, nil
}

// ReleaseDeadRelays implements [outboxdriver.Executor]: a read of the
// expired heartbeats, then a transaction per relay that deletes its
// heartbeat and releases its claims.
func (d *driver) ReleaseDeadRelays(ctx context.Context, p outboxdriver.ReleaseDeadRelaysParams) ([]outboxdriver.ReleasedRelay, error) {
	now := sqlcodec.Micros(p.Now)
	expired, err := sqlcodec.QueryPairs(ctx, d.db, d.t.sql.expiredHeartbeats, outboxdriver.HeartbeatPattern, now, p.Limit) // name, owner
	if err != nil {
		return nil, fmt.Errorf("sqlite: find dead relays: %w", err)
	}
	var released []outboxdriver.ReleasedRelay
	for _, h := range expired {
		r, won, err := d.releaseDeadRelay(ctx, h[0], h[1], now)
		if err != nil {
			return released, fmt.Errorf("sqlite: release the claims of dead relay %s: %w", h[1], err)
		}
		if won {
			released = append(released, r)
		}
	}
	return released, nil
}

// releaseDeadRelay deletes heartbeat name of owner if it is still expired
// at now and then releases owner's claims, in one transaction, and
// reports whether the delete won.
func (d *driver) releaseDeadRelay(ctx context.Context, name, owner string, now int64) (outboxdriver.ReleasedRelay, bool, error) {
	tx, err := d.Begin(ctx)
	if err != nil {
		return outboxdriver.ReleasedRelay{}, false, err
	}
	topics, won, err := d.releaseDeadRelayTx(ctx, tx, name, owner, now)
	if err != nil {
		return outboxdriver.ReleasedRelay{}, false, errors.Join(err, d.Rollback(ctx, tx))
	}
	if err := d.Commit(ctx, tx); err != nil {
		return outboxdriver.ReleasedRelay{}, false, err
	}
	return outboxdriver.ReleasedRelay{Owner: owner, Events: int64(len(topics)),
		Topics: slices.Compact(slices.Sorted(slices.Values(topics)))}, won, nil
}

// releaseDeadRelayTx is releaseDeadRelay's statements in tx: the topic of
// each claim released.
func (d *driver) releaseDeadRelayTx(ctx context.Context, tx *sql.Tx, name, owner string, now int64) (topics []string, won bool, err error) {
	res, err := tx.ExecContext(ctx, d.t.sql.deleteExpiredHeartbeat, name, now)
	if err != nil {
		return nil, false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return nil, false, err
	}
	rows, err := tx.QueryContext(ctx, d.t.sql.releaseAllOwned, owner)
	if err != nil {
		return nil, false, err
	}
	topics, err = sqlcodec.ScanColumn[string](rows)
	return topics, err == nil, err
}

// EndHeartbeat implements [outboxdriver.Executor].
func (d *driver) EndHeartbeat(ctx context.Context, owner string) error {
	_, err := d.exec(ctx, "end the heartbeat of "+owner, d.t.sql.endHeartbeat, outboxdriver.HeartbeatName(owner), owner)
	return err
}

// exec runs one write statement through the gate and returns how many
// rows it changed; op names it in errors.
func (d *driver) exec(ctx context.Context, op, query string, args ...any) (int64, error) {
	if err := d.gate.enter(ctx, op); err != nil {
		return 0, err
	}
	defer d.gate.leave()
	res, err := d.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	return n, nil
}

// isUniqueViolation reports a duplicate event id.
func isUniqueViolation(err error) bool {
	var e *modernc.Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}
