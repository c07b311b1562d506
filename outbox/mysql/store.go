package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/wmoutbox/wmoutbox/internal/ident"
	"github.com/wmoutbox/wmoutbox/internal/sqlcodec"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// DefaultTable is the outbox table's name when [Config.Table] is empty.
const DefaultTable = "outbox_event"

// A batch insert is split into statements of at most maxInsertRows rows
// and about maxInsertBytes of payloads and headers: every statement has
// to fit the server's max_allowed_packet (16 MiB on MariaDB, 64 MiB on
// MySQL 8) when the driver interpolates parameters, and MySQL takes at
// most 65,535 parameters.
const (
	maxInsertRows  = 1000
	maxInsertBytes = 4 << 20
)

// Config configures a [Store]. The zero value is the default table in the
// connection's database.
type Config struct {
	// Table is the outbox table's name. Default [DefaultTable]. 1 to 48
	// characters of a-z, 0-9 and _, not starting with a digit, sqlite_ or
	// pg_, and not wmoutbox_migration, where [Migrate] records the
	// migrations; otherwise [ErrInvalidIdentifier].
	Table string
	// Clock stamps created/updated/done times and decides what is due.
	// Default [outbox.SystemClock].
	Clock outbox.Clock
	// Logger receives after-commit hook failures of [Store.InTx]. Default
	// slog.Default().
	Logger *slog.Logger
	// DeleteDone deletes an event's row once it is delivered, instead of
	// keeping it with status DONE until a [Store.Purge]. Default false.
	// The table then holds only pending and DEAD events, and the record of
	// what was delivered and when (done_at) is gone. RETRY and DEAD are
	// recorded as always. Rows already DONE are left to Purge.
	DeleteDone bool
}

// Store is the MySQL outbox store on database/sql with
// github.com/go-sql-driver/mysql: an [outbox.TxStore] for *sql.Tx. It is
// safe for concurrent use.
type Store struct {
	db     *sql.DB
	clock  outbox.Clock
	logger *slog.Logger
	t      *table
}

var _ outbox.TxStore[*sql.Tx] = (*Store)(nil)

// table is a validated table's names and the SQL rendered for it.
type table struct {
	sqlcodec.Table
	sql statements
}

func newTable(cfg Config) (*table, error) {
	names, err := sqlcodec.NewTable("mysql", cmp.Or(cfg.Table, DefaultTable), quote, ErrInvalidIdentifier)
	if err != nil {
		return nil, err
	}
	t := &table{Table: names}
	t.sql = renderStatements(t.Quoted, quote(t.Name+"_id_idx"), quote(t.Name+"_due_idx"), t.Inbox, quote(ident.MigrationTable), cfg.DeleteDone)
	return t, nil
}

// quote quotes a validated name, which holds only a-z, 0-9 and _.
func quote(name string) string { return "`" + name + "`" }

// NewStore returns a store on db, a database opened with the "mysql"
// driver of github.com/go-sql-driver/mysql. Claims, status updates and
// operator queries run on db; inserts run in the transaction given to
// [Store.Insert]. It does not touch the database: run [Migrate] first.
func NewStore(db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: mysql store needs a database", outbox.ErrInvalidRequest)
	}
	t, err := newTable(cfg)
	if err != nil {
		return nil, err
	}
	return &Store{db: db, clock: outbox.ClockOrSystem(cfg.Clock), logger: cmp.Or(cfg.Logger, slog.Default()), t: t}, nil
}

// InTx runs fn in a transaction on the store's database, commits, and then
// runs the after-commit hooks registered during fn (see [outbox.RunInTx]).
// It returns fn's error, the begin or commit error, the error of a check
// before the commit, or ctx's cause when ctx ended before the commit.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return InTx(ctx, s.db, s.logger, fn)
}

// InTx runs fn in a transaction begun on db, at the server's isolation
// level, as [outbox.RunInTx] does: commit when fn returns nil, roll back
// otherwise, and after a commit run the hooks fn registered with
// [outbox.AfterCommit]; their failures go to logger (nil: slog.Default()).
// The context given to fn carries tx, so an outbox Watermill publisher
// given that context writes in it.
//
// A deadlock makes MySQL roll back the whole transaction. When a write of
// the store in fn meets one, the store ends the *sql.Tx too (see
// [ErrTransactionRolledBack]), and InTx returns that error instead of
// committing, even if fn returned nil.
func InTx(ctx context.Context, db *sql.DB, logger *slog.Logger, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return outbox.RunInTx(ctx, outbox.TxFuncs[*sql.Tx]{
		Begin: func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) },
		Commit: func(_ context.Context, tx *sql.Tx) error {
			if err := rolledBack(tx); err != nil {
				return err // and tx was rolled back when it was met
			}
			return tx.Commit()
		},
		Rollback: func(_ context.Context, tx *sql.Tx) error { return tx.Rollback() },
	}, logger, fn)
}

// rolledBackTxs holds the transactions in which a statement of the store
// made MySQL roll the transaction back, with that statement's error
// (wrapped in ErrTransactionRolledBack): weak.Pointer[sql.Tx] to error.
// The store ended those *sql.Tx, which refuse every statement with
// sql.ErrTxDone; this is for the error to say why, in the store's later
// writes in them and in InTx's commit. An entry goes when its
// transaction is garbage.
var rolledBackTxs sync.Map

// rolledBackCount is the number of entries of rolledBackTxs: while it is
// 0, as it nearly always is, a write asks nothing more (weak.Make would
// give every transaction a weak handle).
var rolledBackCount atomic.Int64

// rolledBack returns the error with which MySQL rolled back tx, if a
// statement of the store in tx met one.
func rolledBack(tx *sql.Tx) error {
	if rolledBackCount.Load() == 0 {
		return nil
	}
	if err, ok := rolledBackTxs.Load(weak.Make(tx)); ok {
		return err.(error)
	}
	return nil
}

// failedIn returns err, the error of a statement of the store in tx,
// wrapped in [ErrTransactionRolledBack] when MySQL rolled back the whole
// transaction with it, and then records that tx is gone and ends it.
func failedIn(ctx context.Context, tx *sql.Tx, err error) error {
	if !rollsBackTransaction(ctx, tx, err) {
		return err
	}
	err = fmt.Errorf("%w: %w", ErrTransactionRolledBack, err)
	key := weak.Make(tx)
	if _, known := rolledBackTxs.LoadOrStore(key, err); !known {
		rolledBackCount.Add(1)
		runtime.AddCleanup(tx, func(key weak.Pointer[sql.Tx]) {
			rolledBackTxs.Delete(key)
			rolledBackCount.Add(-1)
		}, key)
	}
	// Ended here too, the *sql.Tx refuses the business's next statements
	// (sql.ErrTxDone), which would otherwise commit one by one, and its
	// Commit fails instead of committing nothing.
	_ = tx.Rollback()
	return err
}

// rollsBackTransaction reports whether MySQL rolled back the whole
// transaction tx with err, the error of a statement in it: a deadlock
// does; a lock wait timeout does when innodb_rollback_on_timeout is set,
// which the session is asked (a failed question counts as set: the
// transaction is then ended, never left to commit alone).
func rollsBackTransaction(ctx context.Context, tx *sql.Tx, err error) bool {
	var e *mysqldriver.MySQLError
	if !errors.As(err, &e) {
		return false
	}
	switch e.Number {
	case erLockDeadlock:
		return true
	case erLockWaitTimeout:
		var set bool
		return tx.QueryRowContext(ctx, sqlRollbackOnTimeout).Scan(&set) != nil || set
	}
	return false
}

// MySQL's error numbers that the store tells apart.
const (
	erDupEntry        = 1062
	erLockWaitTimeout = 1205
	erLockDeadlock    = 1213
)

// Insert implements [outbox.Inserter]: one statement for a batch of up to
// 1,000 events and 4 MiB, which InnoDB applies whole or not at all; a
// larger batch takes a statement for each such part, and when one fails,
// the rows of those before are deleted again, so that tx holds the whole
// batch or none of it (a MySQL transaction, unlike a PostgreSQL one, goes
// on after most failed statements; after a deadlock, see
// [ErrTransactionRolledBack]). Events must come from [outbox.Prepare]
// (the [outbox.Writer] does this).
//
// MySQL cannot tell whether a savepoint opened on tx (a SAVEPOINT
// statement) holds the rows, so Insert marks every write with hot events
// as one in a savepoint: a [outbox.Writer] looks them up before the
// commit with [Store.Kept].
func (s *Store) Insert(ctx context.Context, tx *sql.Tx, hot, cold []outbox.Envelope, lease outbox.Lease) (savepoint uint64, err error) {
	if tx == nil {
		return 0, outbox.ErrNoTransaction
	}
	if len(hot)+len(cold) == 0 {
		return 0, nil
	}
	if lease.Duration <= 0 {
		lease.Duration = outbox.DefaultLockTimeout
	}
	if err := rolledBack(tx); err != nil {
		return 0, err
	}
	rows, err := insertRows(hot, cold, lease, s.clock.Now())
	if err != nil {
		return 0, err
	}
	var inserted []string // the ids of the statements that succeeded
	for len(rows) > 0 {
		n := statementRows(rows)
		if err := s.insertStatement(ctx, tx, rows[:n]); err != nil {
			if rolledBack(tx) != nil {
				return 0, err // and with the transaction, its rows
			}
			if undoErr := s.undoInsert(ctx, tx, inserted); undoErr != nil {
				err = errors.Join(err, undoErr)
			}
			return 0, err
		}
		for _, r := range rows[:n] {
			inserted = append(inserted, r.id)
		}
		rows = rows[n:]
	}
	if len(hot) > 0 {
		savepoint = 1
	}
	return savepoint, nil
}

// insertRow is an event's row as sqlInsert's parameters for it.
type insertRow struct {
	id     string
	params []any
	size   int // of the payload and headers, in bytes
}

// insertRows returns the rows of an Insert written at now.
func insertRows(hot, cold []outbox.Envelope, lease outbox.Lease, now time.Time) ([]insertRow, error) {
	rows := make([]insertRow, 0, len(hot)+len(cold))
	for e, claiming := range outbox.InsertRows(hot, cold, lease) {
		params, size, err := sqlcodec.InsertValues(e, claiming, lease, now)
		if err != nil {
			return nil, err
		}
		rows = append(rows, insertRow{id: e.ID, params: params, size: size})
	}
	return rows, nil
}

// statementRows returns how many of rows, at least one, the next insert
// statement takes: at most maxInsertRows and about maxInsertBytes.
func statementRows(rows []insertRow) int {
	size := rows[0].size
	n := 1
	for n < len(rows) && n < maxInsertRows && size+rows[n].size <= maxInsertBytes {
		size += rows[n].size
		n++
	}
	return n
}

// insertStatement writes rows with one statement, which InnoDB applies
// whole or not at all.
func (s *Store) insertStatement(ctx context.Context, tx *sql.Tx, rows []insertRow) error {
	params := make([]any, 0, len(rows)*insertValuesParams)
	for _, r := range rows {
		params = append(params, r.params...)
	}
	_, err := tx.ExecContext(ctx, s.t.sql.insert(len(rows)), params...)
	err = failedIn(ctx, tx, err)
	if isUniqueViolation(err) {
		return fmt.Errorf("mysql: insert into %s: %w: %w", s.t.Name, outbox.ErrDuplicateEvent, err)
	}
	if err != nil {
		return fmt.Errorf("mysql: insert into %s: %w", s.t.Name, err)
	}
	return nil
}

// undoInsert deletes the rows of ids that an Insert wrote in tx before one
// of its statements failed.
func (s *Store) undoInsert(ctx context.Context, tx *sql.Tx, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.ExecContext(context.WithoutCancel(ctx), s.t.sql.undoInsert, sqlcodec.HexIDs(ids))
	if err = failedIn(ctx, tx, err); err != nil {
		return fmt.Errorf("mysql: undo the first %d rows of a failed insert: %w", len(ids), err)
	}
	return nil
}

// Kept implements [outbox.Inserter]: those of ids that have a row, one
// query by the event id index. An id written again after its savepoint
// rolled back counts as kept, the row being the later write's: give events
// ids of their own, as [outbox.Prepare] does, when you roll back to
// savepoints and write again.
func (s *Store) Kept(ctx context.Context, tx *sql.Tx, _ uint64, ids []string) ([]string, error) {
	if err := rolledBack(tx); err != nil {
		return nil, err
	}
	existing, err := sqlcodec.Existing(ctx, tx, s.t.Label, s.t.sql.existingOne, s.t.sql.existing, ids)
	return existing, failedIn(ctx, tx, err)
}

// Get implements [outbox.Store].
func (s *Store) Get(ctx context.Context, id string) (outbox.Event, error) {
	return sqlcodec.Get(ctx, s.db, s.t.Label, s.t.sql.get, id)
}

// Claim implements [outbox.Store]: in one READ COMMITTED transaction, it
// locks due rows with FOR UPDATE SKIP LOCKED and records the lease in them
// (see sqlClaim). A claim of one topic reads them in due order and follows
// req.Cursor when it is unordered; a claim of several topics, or of all,
// picks its rows first without locking them (sqlCandidates) and leaves the
// cursor alone, as ordered claims do, which start from the earliest due
// event and pass over the events that wait for an earlier one of their
// aggregate.
func (s *Store) Claim(ctx context.Context, req outbox.ClaimRequest) ([]outbox.Event, error) {
	req, err := req.Normalize()
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	due := []any{sqlcodec.Micros(now), sqlcodec.Micros(now.Add(-req.SkipRecent)), sqlcodec.Micros(now)}
	until := now.Add(req.LockTimeout)
	var events []outbox.Event
	err = s.readCommitted(ctx, func(tx *sql.Tx) error {
		var seqs []int64
		var err error
		if len(req.Topics) == 1 {
			events, seqs, err = s.claimTopic(ctx, tx, req, due)
		} else {
			events, seqs, err = s.claimCandidates(ctx, tx, req, due)
		}
		if err != nil || len(events) == 0 {
			return err
		}
		list, err := json.Marshal(seqs)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.t.sql.lease, string(list), req.Owner, sqlcodec.Micros(now), sqlcodec.Micros(until)); err != nil {
			return fmt.Errorf("record the lease: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("mysql: claim: %w", err)
	}
	if len(events) == 0 {
		return nil, nil
	}
	for i := range events {
		e := &events[i]
		e.LockedBy, e.LockedAt, e.LockedUntil = req.Owner, sqlcodec.Stored(now), sqlcodec.Stored(until)
	}
	if len(req.Topics) == 1 && !req.Ordered && req.Cursor != nil {
		*req.Cursor = outbox.CursorAt(events[len(events)-1])
	}
	return events, nil
}

// claimTopic locks the due rows of req's one topic, in due order (sqlClaim).
func (s *Store) claimTopic(ctx context.Context, tx *sql.Tx, req outbox.ClaimRequest, due []any) ([]outbox.Event, []int64, error) {
	query := s.t.sql.claim[0]
	args := append([]any{req.Topics[0]}, due...)
	switch {
	case req.Ordered:
		query = s.t.sql.claim[1]
	case !req.Cursor.IsZero():
		query = s.t.sql.claimAfter
		at := sqlcodec.Micros(req.Cursor.DueAt)
		args = append(args, at, at, req.Cursor.ID)
	}
	return queryClaimed(ctx, tx, query, append(args, req.Limit)...)
}

// claimCandidates locks the due rows of req's topics (all when it names
// none) that sqlCandidates picks, and returns them in due order, and
// their seqs.
func (s *Store) claimCandidates(ctx context.Context, tx *sql.Tx, req outbox.ClaimRequest, due []any) ([]outbox.Event, []int64, error) {
	ordered, filter := 0, 0
	if req.Ordered {
		ordered = 1
	}
	var args []any
	if len(req.Topics) > 1 {
		filter = 1
		args = append(args, sqlcodec.Strings(req.Topics))
	}
	rows, err := tx.QueryContext(ctx, s.t.sql.candidates[ordered][filter], append(append(args, due...), 2*req.Limit)...)
	if err != nil {
		return nil, nil, fmt.Errorf("pick rows: %w", err)
	}
	candidates, err := sqlcodec.ScanColumn[int64](rows)
	if err != nil {
		return nil, nil, fmt.Errorf("pick rows: %w", err)
	}
	var (
		events []outbox.Event
		seqs   []int64
	)
	for len(candidates) > 0 && len(events) < req.Limit {
		n := min(req.Limit-len(events), len(candidates))
		args = args[:0]
		for _, seq := range candidates[:n] {
			args = append(args, seq)
		}
		got, gotSeqs, err := queryClaimed(ctx, tx, s.t.sql.claimOf(ordered, n), append(args, due...)...)
		if err != nil {
			return nil, nil, err
		}
		events, seqs = append(events, got...), append(seqs, gotSeqs...)
		candidates = candidates[n:]
	}
	// Each batch comes in seq order; the lease takes seqs in any order.
	slices.SortFunc(events, outbox.CompareDue)
	return events, seqs, nil
}

// queryClaimed runs a claim's locking read, which selects the event
// columns and seq.
func queryClaimed(ctx context.Context, tx *sql.Tx, query string, args ...any) ([]outbox.Event, []int64, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, nil, err
	}
	return sqlcodec.ScanEventsWithKeys(rows)
}

// PollPending implements [outbox.Store].
func (s *Store) PollPending(ctx context.Context, req outbox.PollRequest) ([]outbox.Event, error) {
	req, err := req.Normalize()
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	query, topicArg := sqlcodec.TopicVariant(s.t.sql.poll, req.Topics)
	var args []any
	if topicArg != nil {
		args = append(args, topicArg)
	}
	args = append(args, sqlcodec.Micros(now), sqlcodec.Micros(now.Add(-req.SkipRecent)), sqlcodec.Micros(now), req.Limit)
	return queryEvents(ctx, s.db, "poll", query, args...)
}

// Release implements [outbox.Store].
func (s *Store) Release(ctx context.Context, owner string, ids []string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	return s.exec(ctx, fmt.Sprintf("release %d claims", len(ids)), s.t.sql.release, sqlcodec.HexIDs(ids), owner)
}

// ReleaseOwned implements [outbox.Store]: a read of the claims' ids, then
// the release of those of them that owner still holds under a claim made
// before claimedBefore.
func (s *Store) ReleaseOwned(ctx context.Context, owner, topic string, claimedBefore time.Time) (int64, error) {
	if err := outbox.ValidateReleaseOwned(owner, topic); err != nil {
		return 0, err
	}
	rows, err := s.db.QueryContext(ctx, s.t.sql.ownedClaims, topic, owner, sqlcodec.Micros(claimedBefore))
	var ids []string
	if err == nil {
		ids, err = sqlcodec.ScanColumn[string](rows)
	}
	if err != nil {
		return 0, fmt.Errorf("mysql: find the claims of %s on %s: %w", owner, topic, err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	return s.exec(ctx, fmt.Sprintf("release the claims of %s on %s", owner, topic), s.t.sql.releaseOwned,
		sqlcodec.HexIDs(ids), owner, sqlcodec.Micros(claimedBefore))
}

// UpdateStatus implements [outbox.Store]: one statement for the DONE
// outcomes of the batch (deleting their rows under [Config.DeleteDone])
// and one for the rest. Of several updates of one id, a DONE wins, else
// the last (see [outbox.PrepareUpdates]).
func (s *Store) UpdateStatus(ctx context.Context, owner string, updates ...outbox.StatusUpdate) (int64, error) {
	recordDone := func(ids []string) (int64, error) {
		now := sqlcodec.Micros(s.clock.Now())
		query, args := s.t.sql.markDone, []any{sqlcodec.HexIDs(ids), now, now}
		if s.t.sql.deleteDone != "" {
			query, args = s.t.sql.deleteDone, []any{sqlcodec.HexIDs(ids)}
		}
		return s.exec(ctx, fmt.Sprintf("record %d events done", len(ids)), query, args...)
	}
	return outbox.RecordOutcomes(owner, updates, recordDone, func(updates []outbox.StatusUpdate) (int64, error) {
		batch, err := sqlcodec.StatusUpdates(updates)
		if err != nil {
			return 0, fmt.Errorf("mysql: update status of %d events: %w", len(updates), err)
		}
		now, ownerOrNull := sqlcodec.Micros(s.clock.Now()), sqlcodec.NullIfEmpty(owner)
		return s.exec(ctx, fmt.Sprintf("update status of %d events", len(updates)), s.t.sql.updateStatus, batch, now, ownerOrNull, ownerOrNull, now)
	})
}

// QueryDead implements [outbox.Store].
func (s *Store) QueryDead(ctx context.Context, q outbox.DeadQuery) ([]outbox.Event, error) {
	q, err := q.Normalize()
	if err != nil {
		return nil, err
	}
	return queryEvents(ctx, s.db, "query dead events", s.t.sql.queryDead, append(deadArgs(q.DeadFilter), q.After, q.Limit)...)
}

// CountDead implements [outbox.Store].
func (s *Store) CountDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, s.t.sql.countDead, deadArgs(f)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("mysql: count dead events: %w", err)
	}
	return n, nil
}

// ReplayDead implements [outbox.Store]. It refuses a filter that restricts
// nothing ([outbox.DeadFilter.ValidateReplay]); DiedBefore: time.Now()
// replays every DEAD event.
func (s *Store) ReplayDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	if err := f.ValidateReplay(); err != nil {
		return 0, err
	}
	now := sqlcodec.Micros(s.clock.Now())
	return s.exec(ctx, "replay dead events", s.t.sql.replayDead, append([]any{now, now}, deadArgs(f)...)...)
}

// deadArgs are the parameters of sqlDeadFilter, each twice.
func deadArgs(f outbox.DeadFilter) []any {
	params := make([]any, 0, 8)
	for _, p := range sqlcodec.DeadFilter(f) {
		params = append(params, p, p)
	}
	return params
}

// Backlog implements [outbox.Store].
func (s *Store) Backlog(ctx context.Context, topic string) (int64, time.Time, error) {
	return sqlcodec.Backlog(ctx, s.db, s.t.Label, s.t.sql.backlog, topic)
}

// Purge implements [outbox.Store]. Each batch is a READ COMMITTED
// transaction that locks the rows it deletes with SKIP LOCKED: rows other
// transactions hold are left to the next purge, and a batch they make
// short ends this one.
func (s *Store) Purge(ctx context.Context, req outbox.PurgeRequest) (int64, error) {
	req, err := req.Normalize()
	if err != nil {
		return 0, err
	}
	// sqlPurgePick takes two statuses: the one asked for twice, or both.
	statuses := [2]int{int(req.Statuses[0]), int(req.Statuses[0])}
	for _, st := range req.Statuses {
		if int(st) != statuses[0] {
			statuses[1] = int(st)
		}
	}
	cutoff := sqlcodec.Micros(s.clock.Now().Add(-req.OlderThan))
	return outbox.PurgeInBatches(req.BatchSize, func(deleted int64) (int64, error) {
		n, err := s.deleteLocked(ctx, s.t.sql.purgePick, []any{statuses[0], statuses[1], cutoff, req.BatchSize}, s.t.sql.purgeDelete)
		if err != nil {
			return 0, fmt.Errorf("mysql: purge after %d rows: %w", deleted, err)
		}
		return n, nil
	})
}

// deleteLocked deletes, in a READ COMMITTED transaction of its own, the
// rows that pick locks (with SKIP LOCKED), whose keys it returns as JSON
// values, one a row; remove gets them as one JSON array.
func (s *Store) deleteLocked(ctx context.Context, pick string, pickArgs []any, remove string) (deleted int64, err error) {
	err = s.readCommitted(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, pick, pickArgs...)
		if err != nil {
			return err
		}
		keys, err := sqlcodec.ScanColumn[string](rows)
		if err != nil || len(keys) == 0 {
			return err
		}
		res, err := tx.ExecContext(ctx, remove, "["+strings.Join(keys, ",")+"]")
		if err != nil {
			return err
		}
		deleted, err = res.RowsAffected()
		return err
	})
	return deleted, err
}

// readCommitted runs fn in a READ COMMITTED transaction and commits it
// when fn returns nil: the isolation of claims and purges, whose scans
// then lock no gap of an index, which would hold back the inserts of
// writers (of events, or of inbox records).
func (s *Store) readCommitted(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	// A no-op after the commit; after a failure, fn's error is the one to
	// report.
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// exec runs one write statement and returns how many rows it changed; op
// names it in errors.
func (s *Store) exec(ctx context.Context, op, query string, args ...any) (int64, error) {
	res, err := s.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("mysql: %s: %w", op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("mysql: %s: %w", op, err)
	}
	return n, nil
}

// queryEvents runs a statement returning eventColumns; op names it in
// errors.
func queryEvents(ctx context.Context, q sqlcodec.Querier, op, query string, args ...any) ([]outbox.Event, error) {
	events, err := sqlcodec.QueryEvents(ctx, q, query, args...)
	if err != nil {
		return nil, fmt.Errorf("mysql: %s: %w", op, err)
	}
	return events, nil
}

// isUniqueViolation reports a duplicate event id.
func isUniqueViolation(err error) bool {
	var e *mysqldriver.MySQLError
	return errors.As(err, &e) && e.Number == erDupEntry
}
