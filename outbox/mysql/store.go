package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/hex"
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
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
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

// Store is the MySQL outbox store on database/sql with
// github.com/go-sql-driver/mysql: an [outbox.Store] for *sql.Tx, made by
// [NewStore]. It is safe for concurrent use.
type Store = outbox.Store[*sql.Tx]

// driver runs the store's statements on db: the [outboxdriver.Driver] of
// MySQL.
type driver struct {
	db *sql.DB
	t  *table
}

var _ outboxdriver.Driver[*sql.Tx] = (*driver)(nil)

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
	t.sql = renderStatements(t.Quoted, quote(t.Name+"_id_idx"), quote(t.Name+"_due_idx"), quote(t.Name+"_idem_key_idx"), t.Inbox, t.Lease, quote(ident.MigrationTable), cfg.DeleteDone)
	return t, nil
}

// quote quotes a validated name, which holds only a-z, 0-9 and _.
func quote(name string) string { return "`" + name + "`" }

// NewStore returns a store on db, a database opened with the "mysql"
// driver of github.com/go-sql-driver/mysql. Claims, outcomes and operator
// queries run on db; events are written in the transactions given to an
// [outbox.Writer] or a Publisher. It does not touch the database: run
// [Migrate] first.
//
// The transactions [outbox.Store.InTx] begins are at the server's
// isolation level. A deadlock makes MySQL roll back the whole
// transaction: when a write of the store in one meets it, the store ends
// the *sql.Tx too (see [ErrTransactionRolledBack]), and InTx returns that
// error instead of committing, even if fn returned nil.
func NewStore(db *sql.DB, cfg Config) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: mysql store needs a database", outbox.ErrInvalidRequest)
	}
	t, err := newTable(cfg)
	if err != nil {
		return nil, err
	}
	return outbox.NewStore[*sql.Tx](&driver{db: db, t: t}, outbox.StoreConfig{Clock: cfg.Clock, Logger: cfg.Logger})
}

// Begin implements [outboxdriver.Driver].
func (d *driver) Begin(ctx context.Context) (*sql.Tx, error) { return d.db.BeginTx(ctx, nil) }

// Commit implements [outboxdriver.Driver]. It refuses a transaction that
// MySQL rolled back under a write of the store, with that write's error:
// the store ended it then.
func (d *driver) Commit(_ context.Context, tx *sql.Tx) error {
	if err := rolledBack(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// Rollback implements [outboxdriver.Driver].
func (d *driver) Rollback(_ context.Context, tx *sql.Tx) error { return tx.Rollback() }

// Outer implements [outboxdriver.Driver]: nil, the store beginning
// transactions of its own.
func (d *driver) Outer() any { return nil }

// rolledBackTxs holds the transactions in which a statement of the store
// made MySQL roll the transaction back, with that statement's error
// (wrapped in ErrTransactionRolledBack): weak.Pointer[sql.Tx] to error.
// The store ended those *sql.Tx, which refuse every statement with
// sql.ErrTxDone; this is for the error to say why, in the store's later
// writes in them and in Commit. An entry goes when its
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
	erDupFieldName    = 1060
	erDupKeyName      = 1061
	erDupEntry        = 1062
	erLockWaitTimeout = 1205
	erLockDeadlock    = 1213
)

// Insert implements [outboxdriver.Driver]: one statement for a batch of
// up to 1,000 events and 4 MiB, which InnoDB applies whole or not at all;
// a larger batch takes a statement for each such part, and when one
// fails, the rows of those before are deleted again, so that tx holds the
// whole batch or none of it (a MySQL transaction, unlike a PostgreSQL one,
// goes on after most failed statements; after a deadlock, see
// [ErrTransactionRolledBack]).
//
// MySQL has no insert that skips the rows of a taken idempotency key and
// only those (INSERT IGNORE skips rows for any error, ON DUPLICATE KEY
// UPDATE for a taken event id too). A taken key fails the statement
// alone, once the transaction that took it has committed (InnoDB waits
// for it); Insert then reads which keys of the statement's rows are taken,
// with a locking read that sees that commit, and runs the statement again
// without those rows, until it succeeds or the failure was not a key's (a
// duplicate event id). A write whose keys are all free costs nothing more.
//
// MySQL cannot tell whether a savepoint opened on tx (a SAVEPOINT
// statement) holds the rows, so with p.Mark Insert returns a mark for
// every write: the engine looks the rows up before the commit with Kept.
func (d *driver) Insert(ctx context.Context, tx *sql.Tx, p *outboxdriver.InsertParams) (outboxdriver.InsertResult, error) {
	if len(p.Rows) == 0 {
		return outboxdriver.InsertResult{}, nil
	}
	if err := rolledBack(tx); err != nil {
		return outboxdriver.InsertResult{}, err
	}
	var (
		res      outboxdriver.InsertResult
		inserted []string // the ids of the statements that succeeded
	)
	rows := insertRows(p)
	for len(rows) > 0 {
		n := statementRows(rows)
		written, skipped, err := d.insertSkipping(ctx, tx, p, rows[:n])
		if err != nil {
			if rolledBack(tx) != nil {
				return outboxdriver.InsertResult{}, err // and with the transaction, its rows
			}
			if undoErr := d.undoInsert(ctx, tx, inserted); undoErr != nil {
				err = errors.Join(err, undoErr)
			}
			return outboxdriver.InsertResult{}, err
		}
		inserted = append(inserted, written...)
		res.Skipped = append(res.Skipped, skipped...)
		rows = rows[n:]
	}
	if p.RejectDuplicateKeys && len(res.Skipped) > 0 {
		if err := d.undoInsert(ctx, tx, inserted); err != nil {
			return outboxdriver.InsertResult{}, err
		}
	}
	if p.Mark {
		res.Savepoint = 1
	}
	return res, nil
}

// insertSkipping writes rows, which one statement takes, but those whose
// topic and idempotency key are taken, and returns the ids it wrote and
// the rows it skipped. Each run of the statement after the first leaves
// out at least one row more, so it runs at most once per row.
func (d *driver) insertSkipping(ctx context.Context, tx *sql.Tx, p *outboxdriver.InsertParams, rows []insertRow) (written []string, skipped []outboxdriver.SkippedRow, err error) {
	for len(rows) > 0 {
		err := d.insertStatement(ctx, tx, rows)
		if err == nil {
			break
		}
		if !errors.Is(err, outbox.ErrDuplicateEvent) || rolledBack(tx) != nil {
			return nil, nil, err
		}
		holders, lookupErr := d.keyHolders(ctx, tx, p.Rows, rows)
		if lookupErr != nil {
			return nil, nil, errors.Join(err, lookupErr)
		}
		if len(holders) == 0 {
			return nil, nil, err // an event id, not a key
		}
		rows = slices.DeleteFunc(slices.Clone(rows), func(r insertRow) bool {
			id, held := holders[r.index]
			if held {
				skipped = append(skipped, outboxdriver.SkippedRow{Index: r.index, ExistingID: id})
			}
			return held
		})
	}
	for _, r := range rows {
		written = append(written, r.id)
	}
	slices.SortFunc(skipped, func(a, b outboxdriver.SkippedRow) int { return cmp.Compare(a.Index, b.Index) })
	return written, skipped, nil
}

// keyHolders returns the event ids of the rows holding the topics and
// idempotency keys of rows, by place in all (those without a key hold
// none), with a locking read (see sqlKeyHolders).
func (d *driver) keyHolders(ctx context.Context, tx *sql.Tx, all []outboxdriver.InsertRow, rows []insertRow) (map[int]string, error) {
	var keys [][3]any
	for _, r := range rows {
		if k := all[r.index].IdempotencyKey; k != "" {
			keys = append(keys, [3]any{r.index, hex.EncodeToString([]byte(all[r.index].Topic)), hex.EncodeToString([]byte(k))})
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	batch, err := json.Marshal(keys)
	if err != nil {
		return nil, err
	}
	holders := make(map[int]string, len(keys))
	result, err := tx.QueryContext(ctx, d.t.sql.keyHolders, string(batch))
	if err == nil {
		defer result.Close()
		for result.Next() {
			var (
				place int
				id    string
			)
			if err = result.Scan(&place, &id); err != nil {
				break
			}
			holders[place] = id
		}
		err = cmp.Or(err, result.Err())
	}
	if err = failedIn(ctx, tx, err); err != nil {
		return nil, fmt.Errorf("mysql: look up %d idempotency keys: %w", len(keys), err)
	}
	return holders, nil
}

// insertRow is an event's row as sqlInsert's parameters for it.
type insertRow struct {
	index  int // in the InsertParams' rows
	id     string
	params []any
	size   int // of the payload and headers, in bytes
}

// insertRows returns the rows of p as sqlInsert's parameters.
func insertRows(p *outboxdriver.InsertParams) []insertRow {
	rows := make([]insertRow, len(p.Rows))
	for i := range p.Rows {
		params, size := sqlcodec.InsertValues(&p.Rows[i], p)
		rows[i] = insertRow{index: i, id: p.Rows[i].ID, params: params, size: size}
	}
	return rows
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
func (d *driver) insertStatement(ctx context.Context, tx *sql.Tx, rows []insertRow) error {
	params := make([]any, 0, len(rows)*insertValuesParams)
	for _, r := range rows {
		params = append(params, r.params...)
	}
	_, err := tx.ExecContext(ctx, d.t.sql.insert(len(rows)), params...)
	err = failedIn(ctx, tx, err)
	if isUniqueViolation(err) {
		return fmt.Errorf("mysql: insert into %s: %w: %w", d.t.Name, outbox.ErrDuplicateEvent, err)
	}
	if err != nil {
		return fmt.Errorf("mysql: insert into %s: %w", d.t.Name, d.notMigrated(err))
	}
	return nil
}

// undoInsert deletes the rows of ids that an Insert wrote in tx before one
// of its statements failed.
func (d *driver) undoInsert(ctx context.Context, tx *sql.Tx, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.ExecContext(context.WithoutCancel(ctx), d.t.sql.undoInsert, sqlcodec.HexIDs(ids))
	if err = failedIn(ctx, tx, err); err != nil {
		return fmt.Errorf("mysql: undo the first %d rows of a failed insert: %w", len(ids), err)
	}
	return nil
}

// Kept implements [outboxdriver.Driver]: those of ids that have a row, one
// query by the event id index. An id written again after its savepoint
// rolled back counts as kept, the row being the later write's: give events
// ids of their own, as the [outbox.Writer] does, when you roll back to
// savepoints and write again.
func (d *driver) Kept(ctx context.Context, tx *sql.Tx, _ uint64, ids []string) ([]string, error) {
	if err := rolledBack(tx); err != nil {
		return nil, err
	}
	existing, err := sqlcodec.Existing(ctx, tx, d.t.Label, d.t.sql.existingOne, d.t.sql.existing, ids)
	return existing, failedIn(ctx, tx, err)
}

// Get implements [outboxdriver.Executor].
func (d *driver) Get(ctx context.Context, id string) (outboxdriver.Row, bool, error) {
	return sqlcodec.Get(ctx, d.db, d.t.Label, d.t.sql.get, id)
}

// Claim implements [outboxdriver.Executor]: in one READ COMMITTED
// transaction, it locks due rows of p.Topic in due order with FOR UPDATE
// SKIP LOCKED (see sqlClaim) and records the lease in them by primary key
// (sqlLease). An unordered claim starts after p.After; an ordered one
// starts from the earliest due row, passes over the rows that wait for an
// earlier one of their aggregate, and ignores p.After and p.Aggregates.
func (d *driver) Claim(ctx context.Context, p *outboxdriver.ClaimParams) ([]outboxdriver.Row, error) {
	query := d.t.sql.claim[0]
	now := sqlcodec.Micros(p.Now)
	args := []any{p.Topic, now, sqlcodec.Micros(p.CreatedBefore), now}
	switch {
	case p.Ordered:
		query = d.t.sql.claim[1]
	case p.After != nil:
		query = d.t.sql.claimAfter
		at := sqlcodec.Micros(p.After.DueAt)
		args = append(args, at, at, p.After.ID)
	}
	args = append(args, p.Limit)
	var claimed []outboxdriver.Row
	err := d.readCommitted(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, query, args...) //nolint:rowserrcheck // ScanRowsWithKeys checks rows.Err and closes rows
		if err != nil {
			return err
		}
		var seqs []int64
		claimed, seqs, err = sqlcodec.ScanRowsWithKeys(rows)
		if err != nil || len(claimed) == 0 {
			return err
		}
		if p.Ordered && p.RunLength > 1 {
			followers, followerSeqs, err := d.runsAfter(ctx, tx, p, claimed, seqs)
			if err != nil {
				return err
			}
			claimed, seqs = append(claimed, followers...), append(seqs, followerSeqs...)
		}
		list, err := json.Marshal(seqs)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, d.t.sql.lease, string(list), p.Owner, now, sqlcodec.Micros(p.LockedUntil)); err != nil {
			return fmt.Errorf("record the lease: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("mysql: claim: %w", d.notMigrated(err))
	}
	lockedAt, lockedUntil := sqlcodec.Stored(p.Now), sqlcodec.Stored(p.LockedUntil)
	for i := range claimed {
		r := &claimed[i]
		r.LockedBy, r.LockedAt, r.LockedUntil = p.Owner, lockedAt, lockedUntil
	}
	return claimed, nil
}

// runsAfter reads and locks, in the claim's transaction tx, the events
// after the heads it locked (seqs theirs), and returns those of their runs
// (see outboxdriver.ClaimParams.RunLength) and their seqs: one read of
// what follows, one locking read of it.
func (d *driver) runsAfter(ctx context.Context, tx *sql.Tx, p *outboxdriver.ClaimParams, heads []outboxdriver.Row, seqs []int64) ([]outboxdriver.Row, []int64, error) {
	var keyed [][3]any
	for i, h := range heads {
		if h.AggregateID != "" {
			keyed = append(keyed, [3]any{seqs[i], h.AggregateType, h.AggregateID})
		}
	}
	if len(keyed) == 0 {
		return nil, nil, nil
	}
	list, err := json.Marshal(keyed)
	if err != nil {
		return nil, nil, err
	}
	pairs, err := queryRunsAfter(ctx, tx, d.t.sql.runsAfter, string(list), p.Topic, p.RunLength-1)
	if err != nil || len(pairs) == 0 {
		return nil, nil, err
	}
	candidates := make([]int64, len(pairs))
	for i, pair := range pairs {
		candidates[i] = pair[1]
	}
	if list, err = json.Marshal(candidates); err != nil {
		return nil, nil, err
	}
	rows, err := tx.QueryContext(ctx, d.t.sql.lockRun, string(list)) //nolint:rowserrcheck // ScanRowsWithKeys checks rows.Err and closes rows
	if err != nil {
		return nil, nil, fmt.Errorf("lock the runs: %w", err)
	}
	locked, lockedSeqs, err := sqlcodec.ScanRowsWithKeys(rows)
	if err != nil {
		return nil, nil, err
	}
	bySeq := make(map[int64]*outboxdriver.Row, len(locked))
	for i := range locked {
		bySeq[lockedSeqs[i]] = &locked[i]
	}
	// The runs in the heads' order; an event the lock skipped is nil.
	after := make([][]*outboxdriver.Row, len(heads))
	headOf := make([]int, 0, len(keyed))
	for i, h := range heads {
		if h.AggregateID != "" {
			headOf = append(headOf, i)
		}
	}
	for _, pair := range pairs {
		i := headOf[pair[0]-1]
		after[i] = append(after[i], bySeq[pair[1]])
	}
	followers := sqlcodec.Runs(p, heads, after)
	seqOf := make(map[string]int64, len(locked))
	for i := range locked {
		seqOf[locked[i].ID] = lockedSeqs[i]
	}
	followerSeqs := make([]int64, len(followers))
	for i := range followers {
		followerSeqs[i] = seqOf[followers[i].ID]
	}
	return followers, followerSeqs, nil
}

// queryRunsAfter runs sqlRunsAfter: for each event read, the head's place
// in the heads given, from 1, and the event's seq.
func queryRunsAfter(ctx context.Context, tx *sql.Tx, query string, args ...any) ([][2]int64, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read the runs: %w", err)
	}
	defer rows.Close()
	var pairs [][2]int64
	for rows.Next() {
		var pair [2]int64
		if err := rows.Scan(&pair[0], &pair[1]); err != nil {
			return nil, fmt.Errorf("read the runs: %w", err)
		}
		pairs = append(pairs, pair)
	}
	return pairs, rows.Err()
}

// Release implements [outboxdriver.Executor].
func (d *driver) Release(ctx context.Context, p outboxdriver.ReleaseParams) (int64, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	return d.exec(ctx, fmt.Sprintf("release %d claims", len(p.IDs)), d.t.sql.release, sqlcodec.HexIDs(p.IDs), p.Owner)
}

// ReleaseOwned implements [outboxdriver.Executor]: a read of the claims'
// ids, then the release of those of them that p.Owner still holds under a
// claim made before p.ClaimedBefore.
func (d *driver) ReleaseOwned(ctx context.Context, p outboxdriver.ReleaseOwnedParams) (int64, error) {
	before := sqlcodec.Micros(p.ClaimedBefore)
	rows, err := d.db.QueryContext(ctx, d.t.sql.ownedClaims, p.Topic, p.Owner, before)
	var ids []string
	if err == nil {
		ids, err = sqlcodec.ScanColumn[string](rows)
	}
	if err != nil {
		return 0, fmt.Errorf("mysql: find the claims of %s on %s: %w", p.Owner, p.Topic, err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	return d.exec(ctx, fmt.Sprintf("release the claims of %s on %s", p.Owner, p.Topic), d.t.sql.releaseOwned,
		sqlcodec.HexIDs(ids), p.Owner, before)
}

// MarkDone implements [outboxdriver.Executor] in one statement, deleting
// the rows under [Config.DeleteDone].
func (d *driver) MarkDone(ctx context.Context, p outboxdriver.MarkDoneParams) (int64, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	now := sqlcodec.Micros(p.Now)
	query, args := d.t.sql.markDone, []any{sqlcodec.HexIDs(p.IDs), now, now}
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
	now, owner := sqlcodec.Micros(p.Now), sqlcodec.NullIfEmpty(p.Owner)
	return d.exec(ctx, fmt.Sprintf("update status of %d events", len(p.Outcomes)), d.t.sql.updateStatus,
		sqlcodec.Outcomes(p.Outcomes), now, owner, owner, now)
}

// QueryDead implements [outboxdriver.Executor].
func (d *driver) QueryDead(ctx context.Context, p outboxdriver.QueryDeadParams) ([]outboxdriver.Row, error) {
	rows, err := sqlcodec.QueryRows(ctx, d.db, d.t.sql.queryDead, append(deadArgs(p.Filter), p.After, p.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("mysql: query dead events: %w", err)
	}
	return rows, nil
}

// CountDead implements [outboxdriver.Executor].
func (d *driver) CountDead(ctx context.Context, f outboxdriver.DeadFilter) (int64, error) {
	var n int64
	if err := d.db.QueryRowContext(ctx, d.t.sql.countDead, deadArgs(f)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("mysql: count dead events: %w", err)
	}
	return n, nil
}

// ReplayDead implements [outboxdriver.Executor].
func (d *driver) ReplayDead(ctx context.Context, p outboxdriver.ReplayDeadParams) (int64, error) {
	now := sqlcodec.Micros(p.Now)
	return d.exec(ctx, "replay dead events", d.t.sql.replayDead, append([]any{now, now}, deadArgs(p.Filter)...)...)
}

// deadArgs are the parameters of sqlDeadFilter, each twice.
func deadArgs(f outboxdriver.DeadFilter) []any {
	params := make([]any, 0, 8)
	for _, p := range sqlcodec.DeadFilter(f) {
		params = append(params, p, p)
	}
	return params
}

// Backlog implements [outboxdriver.Executor].
func (d *driver) Backlog(ctx context.Context, topic string) (int64, time.Time, error) {
	return sqlcodec.Backlog(ctx, d.db, d.t.Label, d.t.sql.backlog, topic)
}

// PurgeBatch implements [outboxdriver.Executor] in a READ COMMITTED
// transaction that locks the rows it deletes with SKIP LOCKED: rows other
// transactions hold are passed over.
func (d *driver) PurgeBatch(ctx context.Context, p outboxdriver.PurgeParams) (int64, error) {
	if len(p.Statuses) == 0 {
		return 0, nil
	}
	// sqlPurgePick takes two statuses: the one asked for twice, or both.
	statuses := [2]int16{p.Statuses[0], p.Statuses[0]}
	for _, st := range p.Statuses {
		if st != statuses[0] {
			statuses[1] = st
		}
	}
	pick := []any{statuses[0], statuses[1], sqlcodec.Micros(p.Before), p.Limit}
	n, err := d.deleteLocked(ctx, d.t.sql.purgePick, pick, d.t.sql.purgeDelete)
	if err != nil {
		return 0, fmt.Errorf("mysql: purge %s: %w", d.t.Name, err)
	}
	return n, nil
}

// deleteLocked deletes, in a READ COMMITTED transaction of its own, the
// rows that pick locks (with SKIP LOCKED), whose keys it returns as JSON
// values, one a row; remove gets them as one JSON array.
func (d *driver) deleteLocked(ctx context.Context, pick string, pickArgs []any, remove string) (deleted int64, err error) {
	err = d.readCommitted(ctx, func(tx *sql.Tx) error {
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

// PurgeDeadBatch implements [outboxdriver.Executor] as PurgeBatch does:
// the batch is picked with SKIP LOCKED, then deleted by primary key.
func (d *driver) PurgeDeadBatch(ctx context.Context, p outboxdriver.PurgeDeadParams) (int64, error) {
	n, err := d.deleteLocked(ctx, d.t.sql.purgeDeadPick, append(deadArgs(p.Filter), p.Limit), d.t.sql.purgeDelete)
	if err != nil {
		return 0, fmt.Errorf("mysql: purge dead events of %s: %w", d.t.Name, err)
	}
	return n, nil
}

// DeadGroups implements [outboxdriver.Executor]: the groups, then their
// topics.
func (d *driver) DeadGroups(ctx context.Context, p outboxdriver.DeadGroupsParams) ([]outboxdriver.DeadGroup, error) {
	filter := deadArgs(p.Filter)
	groups := append(append(slices.Clip(filter), filter...), p.Limit)
	return sqlcodec.DeadGroups(ctx, d.db, d.t.Label, d.t.sql.deadGroups, groups, d.t.sql.deadGroupTopics, filter)
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
	if len(p.Statuses) == 0 {
		return nil, nil
	}
	statuses := [2]int16{p.Statuses[0], p.Statuses[0]}
	for _, st := range p.Statuses {
		if st != statuses[0] {
			statuses[1] = st
		}
	}
	topic := sqlcodec.NullIfEmpty(p.Topic)
	rows, err := sqlcodec.QueryRows(ctx, d.db, d.t.sql.queryPending, statuses[0], statuses[1], topic, topic, p.After, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("mysql: query pending events: %w", err)
	}
	return rows, nil
}

// QueryEvents implements [outboxdriver.Executor].
func (d *driver) QueryEvents(ctx context.Context, p outboxdriver.QueryEventsParams) ([]outboxdriver.Row, error) {
	rows, err := sqlcodec.QueryRows(ctx, d.db, d.t.sql.queryEvents, p.After, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("mysql: query events: %w", err)
	}
	return rows, nil
}

// QueryAggregate implements [outboxdriver.Executor].
func (d *driver) QueryAggregate(ctx context.Context, p outboxdriver.QueryAggregateParams) ([]outboxdriver.Row, error) {
	topic := sqlcodec.NullIfEmpty(p.Topic)
	query, args := d.t.sql.queryAggregate, []any{p.ID, p.Type, topic, topic}
	if p.Before != nil {
		at := sqlcodec.Micros(p.Before.CreatedAt)
		query, args = d.t.sql.queryAggregateBefore, append(args, at, at, p.Before.ID)
	}
	rows, err := sqlcodec.QueryRows(ctx, d.db, query, append(args, p.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("mysql: query aggregate: %w", err)
	}
	return rows, nil
}

// leaseAttempts is how many times AcquireLease tries a lease whose
// statement InnoDB chose as a deadlock's victim: concurrent inserts of a
// new key can deadlock on it, and the victim is only told to try again.
const leaseAttempts = 3

// AcquireLease implements [outboxdriver.Executor]: one upsert takes or
// renews the lease, and the same transaction reads who holds it.
func (d *driver) AcquireLease(ctx context.Context, p outboxdriver.LeaseParams) (held bool, err error) {
	for range leaseAttempts {
		err = d.readCommitted(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, d.t.sql.acquireLease, p.Name, p.Owner, sqlcodec.Micros(p.Until), sqlcodec.Micros(p.Now)); err != nil {
				return err
			}
			var owner string
			if err := tx.QueryRowContext(ctx, d.t.sql.leaseHolder, p.Name).Scan(&owner); err != nil {
				return err
			}
			held = owner == p.Owner
			return nil
		})
		var e *mysqldriver.MySQLError
		if !errors.As(err, &e) || e.Number != erLockDeadlock {
			break
		}
	}
	if err != nil {
		return false, fmt.Errorf("mysql: lease %s: %w", p.Name, err)
	}
	return held, nil
}

// Heartbeat implements [outboxdriver.Executor] in one upsert, which
// counts one changed row when it inserts.
func (d *driver) Heartbeat(ctx context.Context, p outboxdriver.HeartbeatParams) (bool, error) {
	n, err := d.exec(ctx, "heartbeat of "+p.Owner, d.t.sql.heartbeat, outboxdriver.HeartbeatName(p.Owner), p.Owner, sqlcodec.Micros(p.Until))
	return err == nil && n != 1, err
}

// ReleaseDeadRelays implements [outboxdriver.Executor]: a read of the
// expired heartbeats, then a READ COMMITTED transaction per relay that
// deletes its heartbeat, reads its claims and releases them.
func (d *driver) ReleaseDeadRelays(ctx context.Context, p outboxdriver.ReleaseDeadRelaysParams) ([]outboxdriver.ReleasedRelay, error) {
	now := sqlcodec.Micros(p.Now)
	expired, err := sqlcodec.QueryPairs(ctx, d.db, d.t.sql.expiredHeartbeats, outboxdriver.HeartbeatPattern, now, p.Limit) // name, owner
	if err != nil {
		return nil, fmt.Errorf("mysql: find dead relays: %w", err)
	}
	var released []outboxdriver.ReleasedRelay
	for _, h := range expired {
		name, owner := h[0], h[1]
		r := outboxdriver.ReleasedRelay{Owner: owner}
		won := false
		err := d.readCommitted(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, d.t.sql.deleteExpiredHeartbeat, name, now)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return err
			}
			won = true
			ids, topics, err := d.claimsOf(ctx, tx, owner)
			if err != nil || len(ids) == 0 {
				return err
			}
			r.Topics = topics
			res, err = tx.ExecContext(ctx, d.t.sql.release, sqlcodec.HexIDs(ids), owner)
			if err == nil {
				r.Events, err = res.RowsAffected()
			}
			return err
		})
		if err != nil {
			return released, fmt.Errorf("mysql: release the claims of dead relay %s: %w", owner, err)
		}
		if won {
			released = append(released, r)
		}
	}
	return released, nil
}

// claimsOf returns the ids of owner's claims on pending events, and their
// distinct topics.
func (d *driver) claimsOf(ctx context.Context, tx *sql.Tx, owner string) (ids, topics []string, err error) {
	claims, err := sqlcodec.QueryPairs(ctx, tx, d.t.sql.claimsOf, owner) // event_id, topic
	if err != nil {
		return nil, nil, err
	}
	seen := make(map[string]bool)
	for _, c := range claims {
		ids = append(ids, c[0])
		if !seen[c[1]] {
			seen[c[1]] = true
			topics = append(topics, c[1])
		}
	}
	return ids, topics, nil
}

// EndHeartbeat implements [outboxdriver.Executor].
func (d *driver) EndHeartbeat(ctx context.Context, owner string) error {
	_, err := d.exec(ctx, "end the heartbeat of "+owner, d.t.sql.endHeartbeat, outboxdriver.HeartbeatName(owner), owner)
	return err
}

// readCommitted runs fn in a READ COMMITTED transaction and commits it
// when fn returns nil: the isolation of claims and purges, whose scans
// then lock no gap of an index, which would hold back the inserts of
// writers (of events, or of inbox records).
func (d *driver) readCommitted(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
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
func (d *driver) exec(ctx context.Context, op, query string, args ...any) (int64, error) {
	res, err := d.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("mysql: %s: %w", op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("mysql: %s: %w", op, err)
	}
	return n, nil
}

// isUniqueViolation reports a duplicate event id.
func isUniqueViolation(err error) bool {
	var e *mysqldriver.MySQLError
	return errors.As(err, &e) && e.Number == erDupEntry
}
