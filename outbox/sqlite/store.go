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

// Store is the SQLite outbox store on database/sql: an [outbox.TxStore]
// for *sql.Tx. It is safe for concurrent use.
type Store struct {
	db     *sql.DB
	gate   *gate
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
	names, err := sqlcodec.NewTable("sqlite", cmp.Or(cfg.Table, DefaultTable), ident.Quote, ErrInvalidIdentifier)
	if err != nil {
		return nil, err
	}
	t := &table{Table: names}
	t.sql = renderStatements(t.Quoted, t.Inbox, cfg.DeleteDone)
	return t, nil
}

// NewStore returns a store on db, a database opened with the "sqlite"
// driver of modernc.org/sqlite, best with [Open]. Claims, status updates
// and operator queries run on db; inserts run in the transaction given to
// [Store.Insert]. It does not touch the database: run [Migrate] first.
func NewStore(db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sqlite store needs a database", outbox.ErrInvalidRequest)
	}
	t, err := newTable(cfg)
	if err != nil {
		return nil, err
	}
	return &Store{db: db, gate: gateOf(db), clock: outbox.ClockOrSystem(cfg.Clock), logger: cmp.Or(cfg.Logger, slog.Default()), t: t}, nil
}

// InTx runs fn in a transaction on the store's database, commits, and then
// runs the after-commit hooks registered during fn (see [outbox.RunInTx]).
// It returns fn's error, the begin or commit error, the error of a check
// before the commit, or ctx's cause when ctx ended before the commit.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return InTx(ctx, s.db, s.logger, fn)
}

// InTx runs fn in a transaction begun on db as [outbox.RunInTx] does:
// commit when fn returns nil, roll back otherwise, and after a commit run
// the hooks fn registered with [outbox.AfterCommit]; their failures go to
// logger (nil: slog.Default()). The context given to fn carries tx, so an
// outbox Watermill publisher given that context writes in it.
//
// The transaction is a writer: it queues with the store's writes on db in
// this process, and holds the write lock until it ends (from BEGIN on a
// database from [Open], whose transactions are IMMEDIATE, which is what a
// transaction that reads before it writes needs). A store write made in fn
// on db waits for it, and fails with [ErrBusy]: write through tx instead.
func InTx(ctx context.Context, db *sql.DB, logger *slog.Logger, fn func(ctx context.Context, tx *sql.Tx) error) error {
	g := gateOf(db)
	return outbox.RunInTx(ctx, outbox.TxFuncs[*sql.Tx]{
		Begin: func(ctx context.Context) (*sql.Tx, error) {
			if err := g.enter(ctx, "begin"); err != nil {
				return nil, err
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				g.leave()
				return nil, err
			}
			return tx, nil
		},
		Commit: func(_ context.Context, tx *sql.Tx) error {
			defer g.leave()
			return tx.Commit()
		},
		Rollback: func(_ context.Context, tx *sql.Tx) error {
			defer g.leave()
			return tx.Rollback()
		},
	}, logger, fn)
}

// Insert implements [outbox.Inserter]: the rows are written in tx by one
// prepared statement, inside a savepoint, so that tx holds the whole batch
// or, when a row fails, none of it (SQLite, unlike PostgreSQL, keeps a
// transaction usable after a failed statement). Inserts in one
// transaction made at once run one after the other. Events must come from
// [outbox.Prepare] (the [outbox.Writer] does this).
//
// SQLite cannot tell whether a savepoint opened on tx (a SAVEPOINT
// statement) holds the rows, so Insert marks every write with hot events
// as one in a savepoint: a [outbox.Writer] looks them up before the
// commit with [Store.Kept].
func (s *Store) Insert(ctx context.Context, tx *sql.Tx, hot, cold []outbox.Envelope, lease outbox.Lease) (savepoint uint64, err error) {
	if err := s.insert(ctx, tx, hot, cold, lease); err != nil {
		return 0, err
	}
	if len(hot) > 0 {
		savepoint = 1
	}
	return savepoint, nil
}

func (s *Store) insert(ctx context.Context, tx *sql.Tx, hot, cold []outbox.Envelope, lease outbox.Lease) (err error) {
	if tx == nil {
		return outbox.ErrNoTransaction
	}
	if len(hot)+len(cold) == 0 {
		return nil
	}
	if lease.Duration <= 0 {
		lease.Duration = outbox.DefaultLockTimeout
	}
	now := s.clock.Now()
	defer inserting.lock(tx)()
	if _, err := tx.ExecContext(ctx, sqlInsertSavepoint); err != nil {
		return fmt.Errorf("sqlite: insert into %s: %w", s.t.Name, err)
	}
	defer func() {
		if err != nil {
			// Undo the rows written so far; the statements fail only when
			// the transaction is gone, which the caller learns from err.
			_, _ = tx.ExecContext(context.WithoutCancel(ctx), sqlInsertUndo)
			_, _ = tx.ExecContext(context.WithoutCancel(ctx), sqlInsertRelease)
		}
	}()
	stmt, err := tx.PrepareContext(ctx, s.t.sql.insert)
	if err != nil {
		return fmt.Errorf("sqlite: insert into %s: %w", s.t.Name, err)
	}
	defer stmt.Close()
	for e, claiming := range outbox.InsertRows(hot, cold, lease) {
		values, _, err := sqlcodec.InsertValues(e, claiming, lease, now)
		if err != nil {
			return err
		}
		_, err = stmt.ExecContext(ctx, values...)
		if isUniqueViolation(err) {
			return fmt.Errorf("sqlite: insert into %s: %w: %w", s.t.Name, outbox.ErrDuplicateEvent, err)
		}
		if err != nil {
			return fmt.Errorf("sqlite: insert into %s: %w", s.t.Name, err)
		}
	}
	if _, err := tx.ExecContext(ctx, sqlInsertRelease); err != nil {
		return fmt.Errorf("sqlite: insert into %s: %w", s.t.Name, err)
	}
	return nil
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

// Kept implements [outbox.Inserter]: those of ids that have a row, one
// query by primary key. An id written again after its savepoint rolled
// back counts as kept, the row being the later write's: give events ids
// of their own, as [outbox.Prepare] does, when you roll back to
// savepoints and write again.
func (s *Store) Kept(ctx context.Context, tx *sql.Tx, _ uint64, ids []string) ([]string, error) {
	return sqlcodec.Existing(ctx, tx, s.t.Label, s.t.sql.existingOne, s.t.sql.existing, ids)
}

// Get implements [outbox.Store].
func (s *Store) Get(ctx context.Context, id string) (outbox.Event, error) {
	return sqlcodec.Get(ctx, s.db, s.t.Label, s.t.sql.get, id)
}

// Claim implements [outbox.Store]. SQLite has no FOR UPDATE SKIP LOCKED
// and needs none: it lets one writer at a time, and the claim is one write
// statement, so it holds the write lock before it reads which rows are
// due. Claimers take turns (waiting up to the busy timeout), and each sees
// the leases of the ones before. req.Cursor is left alone: an SQLite index
// holds no entries for the rows' earlier versions, so a claim has nothing
// to skip.
func (s *Store) Claim(ctx context.Context, req outbox.ClaimRequest) ([]outbox.Event, error) {
	req, err := req.Normalize()
	if err != nil {
		return nil, err
	}
	// The lease starts when the claim takes the rows, after its turn.
	if err := s.gate.enter(ctx, "claim"); err != nil {
		return nil, err
	}
	defer s.gate.leave()
	now := s.clock.Now()
	ordered := 0
	if req.Ordered {
		ordered = 1
	}
	query, topicArg := sqlcodec.TopicVariant(s.t.sql.claim[ordered], req.Topics)
	args := []any{sqlcodec.Micros(now), sqlcodec.Micros(now.Add(-req.SkipRecent)), req.Limit, req.Owner, sqlcodec.Micros(now.Add(req.LockTimeout))}
	if topicArg != nil {
		args = append(args, topicArg)
	}
	events, err := queryEvents(ctx, s.db, "claim", query, args...)
	if err != nil {
		return nil, err
	}
	// RETURNING gives the rows in no set order.
	slices.SortFunc(events, outbox.CompareDue)
	return events, nil
}

// PollPending implements [outbox.Store].
func (s *Store) PollPending(ctx context.Context, req outbox.PollRequest) ([]outbox.Event, error) {
	req, err := req.Normalize()
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	query, topicArg := sqlcodec.TopicVariant(s.t.sql.poll, req.Topics)
	args := []any{sqlcodec.Micros(now), sqlcodec.Micros(now.Add(-req.SkipRecent)), req.Limit}
	if topicArg != nil {
		args = append(args, topicArg)
	}
	return queryEvents(ctx, s.db, "poll", query, args...)
}

// Release implements [outbox.Store].
func (s *Store) Release(ctx context.Context, owner string, ids []string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	return s.exec(ctx, fmt.Sprintf("release %d claims", len(ids)), s.t.sql.release, sqlcodec.HexIDs(ids), owner)
}

// ReleaseOwned implements [outbox.Store], in one statement.
func (s *Store) ReleaseOwned(ctx context.Context, owner, topic string, claimedBefore time.Time) (int64, error) {
	if err := outbox.ValidateReleaseOwned(owner, topic); err != nil {
		return 0, err
	}
	return s.exec(ctx, fmt.Sprintf("release the claims of %s on %s", owner, topic), s.t.sql.releaseOwned,
		topic, owner, sqlcodec.Micros(claimedBefore))
}

// UpdateStatus implements [outbox.Store]: one statement for the DONE
// outcomes of the batch (deleting their rows under [Config.DeleteDone])
// and one for the rest. Of several updates of one id, a DONE wins, else
// the last (see [outbox.PrepareUpdates]).
func (s *Store) UpdateStatus(ctx context.Context, owner string, updates ...outbox.StatusUpdate) (int64, error) {
	recordDone := func(ids []string) (int64, error) {
		query, args := s.t.sql.markDone, []any{sqlcodec.HexIDs(ids), sqlcodec.Micros(s.clock.Now())}
		if s.t.sql.deleteDone != "" {
			query, args = s.t.sql.deleteDone, []any{sqlcodec.HexIDs(ids)}
		}
		return s.exec(ctx, fmt.Sprintf("record %d events done", len(ids)), query, args...)
	}
	return outbox.RecordOutcomes(owner, updates, recordDone, func(updates []outbox.StatusUpdate) (int64, error) {
		batch, err := sqlcodec.StatusUpdates(updates)
		if err != nil {
			return 0, fmt.Errorf("sqlite: update status of %d events: %w", len(updates), err)
		}
		return s.exec(ctx, fmt.Sprintf("update status of %d events", len(updates)), s.t.sql.updateStatus, sqlcodec.Micros(s.clock.Now()), batch, owner)
	})
}

// QueryDead implements [outbox.Store].
func (s *Store) QueryDead(ctx context.Context, q outbox.DeadQuery) ([]outbox.Event, error) {
	q, err := q.Normalize()
	if err != nil {
		return nil, err
	}
	return queryEvents(ctx, s.db, "query dead events", s.t.sql.queryDead, append(sqlcodec.DeadFilter(q.DeadFilter), q.After, q.Limit)...)
}

// CountDead implements [outbox.Store].
func (s *Store) CountDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, s.t.sql.countDead, sqlcodec.DeadFilter(f)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: count dead events: %w", err)
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
	return s.exec(ctx, "replay dead events", s.t.sql.replayDead, append(sqlcodec.DeadFilter(f), sqlcodec.Micros(s.clock.Now()))...)
}

// Backlog implements [outbox.Store].
func (s *Store) Backlog(ctx context.Context, topic string) (int64, time.Time, error) {
	return sqlcodec.Backlog(ctx, s.db, s.t.Label, s.t.sql.backlog, topic)
}

// Purge implements [outbox.Store].
func (s *Store) Purge(ctx context.Context, req outbox.PurgeRequest) (int64, error) {
	req, err := req.Normalize()
	if err != nil {
		return 0, err
	}
	codes := make([]int, len(req.Statuses))
	for i, st := range req.Statuses {
		codes[i] = int(st)
	}
	statuses, err := json.Marshal(codes)
	if err != nil {
		return 0, fmt.Errorf("sqlite: purge: %w", err)
	}
	cutoff := sqlcodec.Micros(s.clock.Now().Add(-req.OlderThan))
	return outbox.PurgeInBatches(req.BatchSize, func(deleted int64) (int64, error) {
		return s.exec(ctx, fmt.Sprintf("purge after %d rows", deleted), s.t.sql.purge, string(statuses), cutoff, req.BatchSize)
	})
}

// exec runs one write statement through the gate and returns how many
// rows it changed; op names it in errors.
func (s *Store) exec(ctx context.Context, op, query string, args ...any) (int64, error) {
	if err := s.gate.enter(ctx, op); err != nil {
		return 0, err
	}
	defer s.gate.leave()
	res, err := s.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	return n, nil
}

// queryEvents runs a statement returning eventColumns; op names it in
// errors.
func queryEvents(ctx context.Context, q sqlcodec.Querier, op, query string, args ...any) ([]outbox.Event, error) {
	events, err := sqlcodec.QueryEvents(ctx, q, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	return events, nil
}

// isUniqueViolation reports a duplicate event id.
func isUniqueViolation(err error) bool {
	var e *modernc.Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}
