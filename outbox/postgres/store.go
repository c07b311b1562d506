package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/internal/ident"
	"github.com/wmoutbox/wmoutbox/internal/migrationfiles"
	"github.com/wmoutbox/wmoutbox/internal/nilcheck"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// DB is what the store needs of a database handle: *pgxpool.Pool,
// *pgx.Conn and pgx.Tx all satisfy it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DefaultTable is the outbox table's name when [Config.Table] is empty.
const DefaultTable = "outbox_event"

// Config configures a [Store]. The zero value is the default table in the
// connection's search_path.
type Config struct {
	// Schema holding the table. Default "": unqualified, resolved by the
	// connection's search_path. Must pass [ValidateIdentifier] (63 chars).
	Schema string
	// Table is the outbox table's name. Default [DefaultTable]. Must pass
	// [ValidateIdentifier] with at most 48 characters, and not be
	// wmoutbox_migration, where [Migrate] records the migrations.
	Table string
	// Clock stamps the times the store and its writers write (created,
	// updated, done, replayed) and the cutoff of purges; give a relay on
	// the store the same clock (SubscriberConfig.Clock), which decides
	// what is due. Default [outbox.SystemClock].
	Clock outbox.Clock
	// SynchronousBookkeeping makes the relay's claims, releases and status
	// updates wait for their commit to reach the disk, as PostgreSQL's
	// synchronous_commit does for every transaction. Default false: they
	// do not wait, which removes a disk flush from every claim and every
	// batch of outcomes; a database crash (not a restart) can then forget
	// the last moments of bookkeeping, and those events are delivered
	// again. Event inserts are never affected: they commit with your
	// transaction, as it is configured. A store on a pgx.Tx always waits,
	// whatever this says, since there the relay's statements share your
	// transaction.
	SynchronousBookkeeping bool
	// DeleteDone deletes an event's row once it is delivered, instead of
	// keeping it with status DONE until a [Store.Purge]. Default false.
	// A delivered event then costs the table no second row version and no
	// index entries, and the table holds only pending and DEAD events; the
	// price is the record of what was delivered and when (done_at), which
	// [Store.Get] and operator queries can no longer show. RETRY and DEAD
	// are recorded as always. Rows already DONE are left to Purge.
	DeleteDone bool
	// JSONPayloadColumn writes JSON payloads ([outbox.Envelope.PayloadJSON])
	// to payload_doc, a json column (migration 7), instead of the bytea
	// column payload, which is left empty; bytes payloads stay in payload.
	// SQL (payload_doc->>'total') and change data capture (Debezium's
	// outbox event router, docs/debezium.md) then read JSON payloads as
	// JSON. json keeps the text as written, so the bytes read back are the
	// bytes written; every store reads both kinds of rows, whatever this
	// says. The database parses each JSON payload as it stores it; a JSON
	// payload that is not UTF-8 fails the write with
	// [outbox.ErrInvalidEnvelope] before it is sent, and in a database
	// whose encoding is not UTF8, one with a character that encoding
	// lacks fails the insert. Relays of a wmoutbox before migration 7
	// would deliver these payloads empty: turn it on once none reads the
	// table. Default false: every payload goes to payload.
	JSONPayloadColumn bool
	// NotifyInterval is the least time between two notifications of a
	// [Notifier]: topics committed within it are announced together at its
	// end. Writers committing thousands of events a second then send a
	// notification every few milliseconds instead of one per commit, each
	// of which costs the server a transaction and a claim in every relay
	// it wakes. The first commit after a quiet spell is announced at once.
	// Default [DefaultNotifyInterval]; a nanosecond sends as soon as the
	// previous notification is done; negative is invalid.
	NotifyInterval time.Duration
	// Logger receives after-commit hook failures of [Store.InTx] and the
	// failures of a [Notifier] and a [Listener]. Default slog.Default().
	Logger *slog.Logger
}

// Store is the PostgreSQL outbox store: an [outbox.Store] for pgx.Tx,
// made by [NewStore]. It is safe for concurrent use.
type Store = outbox.Store[pgx.Tx]

// driver runs the store's statements on db: the
// [outboxdriver.Driver] of PostgreSQL.
type driver struct {
	db DB
	t  *table
}

var _ outboxdriver.Driver[pgx.Tx] = (*driver)(nil)

// table is a validated table name and the SQL rendered for it.
type table struct {
	name      string
	schema    string
	qualified string
	inbox     string // the inbox table, qualified
	lease     string // the lease table, qualified
	docs      bool   // Config.JSONPayloadColumn
	sql       statements
}

// qualify quotes name, in the table's schema when it has one.
func (t *table) qualify(name string) string {
	if t.schema == "" {
		return pgx.Identifier{name}.Sanitize()
	}
	return pgx.Identifier{t.schema, name}.Sanitize()
}

func newTable(cfg Config) (*table, error) {
	name := cfg.Table
	if name == "" {
		name = DefaultTable
	}
	if err := ident.ValidateTable(name, ErrInvalidIdentifier); err != nil {
		return nil, err
	}
	if cfg.Schema != "" {
		if err := ident.ValidateNamed("schema", cfg.Schema, maxSchemaLen, ErrInvalidIdentifier); err != nil {
			return nil, err
		}
	}
	t := &table{name: name, schema: cfg.Schema, docs: cfg.JSONPayloadColumn}
	t.qualified, t.inbox = t.qualify(name), t.qualify(name+migrationfiles.InboxSuffix)
	t.lease = t.qualify(name + migrationfiles.LeaseSuffix)
	t.sql = renderStatements(t.qualified, t.inbox, t.lease, cfg)
	return t, nil
}

// NewStore returns a store on db, usually a *pgxpool.Pool. Claims,
// outcomes and operator queries run on db; events are written in the
// transactions given to an [outbox.Writer] or a Publisher. It does not
// touch the database: run [Migrate] first.
//
// When db is a *pgxpool.Pool or a *pgx.Conn, the transaction
// [outbox.Store.InTx] begins spends as few round trips as it can: it holds
// its BEGIN and the events written in it back until it sends something
// else, and sends them with that in one round trip (pgx's
// [pgx.Batch.BeginTx]): with the COMMIT most often, or just before a
// statement of fn's, which goes on its own, as pgx sends it. An event then
// costs its transaction no round trip of its own, and a transaction that
// writes events alone takes one. Statements still run in the order fn made
// them, so a query after an event sees it; but an event's insert error,
// such as [outbox.ErrDuplicateEvent], is returned by the statement after
// it, or by InTx from the commit. From a savepoint (tx.Begin, an InTx of a
// store on tx, or a statement that begins with SAVEPOINT) on, events are
// written at once, so that a write's error comes from the write, for the
// savepoint to undo; and from a call of tx.Conn or tx.LargeObjects on,
// whose statements tx does not see. tx is not a *pgxpool.Tx, and ends with
// InTx: a later call fails with pgx.ErrTxClosed.
//
// When db is a pgx.Tx, InTx opens savepoints in it, and every statement of
// the store runs in that transaction.
func NewStore(db DB, cfg Config) (*Store, error) {
	if nilcheck.Is(db) {
		return nil, fmt.Errorf("%w: postgres store needs a database", outbox.ErrInvalidRequest)
	}
	if _, ok := db.(pgx.Tx); ok {
		// A setting made in a transaction lasts until it ends: the
		// caller's whole transaction would commit without waiting.
		cfg.SynchronousBookkeeping = true
	}
	t, err := newTable(cfg)
	if err != nil {
		return nil, err
	}
	return outbox.NewStore[pgx.Tx](&driver{db: db, t: t}, outbox.StoreConfig{Clock: cfg.Clock, Logger: cfg.Logger})
}

// Begin implements [outboxdriver.Driver].
func (d *driver) Begin(ctx context.Context) (pgx.Tx, error) {
	if tx, ok, err := beginPipeline(ctx, d.db); ok {
		return tx, err
	}
	return d.db.Begin(ctx)
}

// Commit implements [outboxdriver.Driver].
func (d *driver) Commit(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }

// Rollback implements [outboxdriver.Driver].
func (d *driver) Rollback(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) }

// Outer implements [outboxdriver.Driver]: db, when it is a transaction.
func (d *driver) Outer() any {
	if tx, ok := d.db.(pgx.Tx); ok {
		return tx
	}
	return nil
}

// Insert implements [outboxdriver.Driver]: one statement for any number
// of events, run in tx, which with p.Mark also tells whether a savepoint
// holds the rows (from their xmin, which the writing role must be allowed
// to read: GRANT SELECT (xmin) at least). A write with idempotency keys
// is sent at once, even in a transaction of InTx, and takes a second
// statement when it skips rows, to read the event ids holding their keys.
func (d *driver) Insert(ctx context.Context, tx pgx.Tx, p *outboxdriver.InsertParams) (outboxdriver.InsertResult, error) {
	if len(p.Rows) == 0 {
		return outboxdriver.InsertResult{}, nil
	}
	if d.t.docs {
		if err := notUTF8(p.Rows); err != nil {
			return outboxdriver.InsertResult{}, fmt.Errorf("postgres: insert into %s: %w", d.t.qualified, err)
		}
	}
	var owner *string // nil: the rows are written unclaimed
	if p.Owner != "" {
		owner = &p.Owner
	}
	if slices.ContainsFunc(p.Rows, func(r outboxdriver.InsertRow) bool { return r.IdempotencyKey != "" }) {
		return d.insertKeyed(ctx, tx, p, owner)
	}
	var (
		savepoint uint64
		err       error
	)
	if len(p.Rows) == 1 {
		r := &p.Rows[0]
		savepoint, err = d.run(ctx, tx, p.Mark, d.t.sql.insertOne, d.t.sql.insertOneHot, []any{p.Now, owner, r.ID, r.Type, r.Topic,
			r.AggregateType, r.AggregateID, r.TenantID, r.Payload, r.PayloadJSON, nullIfEmpty(r.Headers), r.OccurredAt, r.AvailableAt, r.Claimed, p.LockedUntil})
	} else {
		savepoint, err = d.run(ctx, tx, p.Mark, d.t.sql.insert, d.t.sql.insertHot, insertArgs(p, owner, nil))
	}
	if err != nil {
		return outboxdriver.InsertResult{}, d.insertError(err)
	}
	return outboxdriver.InsertResult{Savepoint: savepoint}, nil
}

// notUTF8 returns an error naming the first row whose JSON payload is not
// UTF-8, which payload_doc cannot hold (Config.JSONPayloadColumn), and nil
// when there is none. It fails the write before it reaches the database,
// whose error would come from the statement after it in a transaction of
// InTx, and would abort the transaction.
func notUTF8(rows []outboxdriver.InsertRow) error {
	for i := range rows {
		if r := &rows[i]; r.PayloadJSON && !utf8.Valid(r.Payload) {
			return fmt.Errorf("%w: event %s: the JSON payload is not UTF-8, which payload_doc (Config.JSONPayloadColumn) needs",
				outbox.ErrInvalidEnvelope, r.ID)
		}
	}
	return nil
}

// keyAttempts bounds the inserts of a write with idempotency keys: each
// one after the first writes again the rows whose key holder was deleted
// (delivered, or purged) between the insert that skipped them and the
// read of the holders.
const keyAttempts = 5

// insertKeyed writes p's rows, some with idempotency keys, at once: what
// was skipped is known before the write returns. A transaction of InTx
// sends what it held back first.
func (d *driver) insertKeyed(ctx context.Context, tx pgx.Tx, p *outboxdriver.InsertParams, owner *string) (outboxdriver.InsertResult, error) {
	if t, ok := tx.(*pipelineTx); ok {
		if err := t.begun(ctx); err != nil {
			return outboxdriver.InsertResult{}, err // a held insert's, wrapped as Insert wraps it
		}
	}
	sql := d.t.sql.insertKeyed
	if p.Mark {
		sql = d.t.sql.insertKeyedHot
	}
	var (
		res     outboxdriver.InsertResult
		written []string
		pending = make([]int, len(p.Rows)) // the rows left to write, by place in p.Rows
	)
	for i := range pending {
		pending[i] = i
	}
	for attempt := 1; len(pending) > 0; attempt++ {
		if attempt > keyAttempts {
			return outboxdriver.InsertResult{}, fmt.Errorf("postgres: insert into %s: the holders of %d idempotency keys were deleted %d times in a row",
				d.t.qualified, len(pending), keyAttempts)
		}
		inserted, mark, err := d.insertRows(ctx, tx, sql, p, owner, pending)
		if err != nil {
			return outboxdriver.InsertResult{}, err
		}
		res.Savepoint = max(res.Savepoint, mark)
		var skipped []int
		for _, i := range pending {
			if inserted[p.Rows[i].ID] {
				written = append(written, p.Rows[i].ID)
			} else {
				skipped = append(skipped, i)
			}
		}
		holders, err := d.keyHolders(ctx, tx, p.Rows, skipped)
		if err != nil {
			return outboxdriver.InsertResult{}, err
		}
		pending = pending[:0]
		for _, i := range skipped {
			if id, ok := holders[i]; ok {
				res.Skipped = append(res.Skipped, outboxdriver.SkippedRow{Index: i, ExistingID: id})
			} else {
				pending = append(pending, i)
			}
		}
	}
	slices.SortFunc(res.Skipped, func(a, b outboxdriver.SkippedRow) int { return cmp.Compare(a.Index, b.Index) })
	if p.RejectDuplicateKeys && len(res.Skipped) > 0 && len(written) > 0 {
		if _, err := tx.Exec(ctx, d.t.sql.undoKeyed, written); err != nil {
			return outboxdriver.InsertResult{}, fmt.Errorf("postgres: undo a write of %d events rejected for a taken idempotency key: %w", len(written), err)
		}
	}
	return res, nil
}

// insertRows runs sql, an insertKeyed statement, for the rows of p at
// places, and returns the event ids it wrote and its savepoint mark.
func (d *driver) insertRows(ctx context.Context, tx pgx.Tx, sql string, p *outboxdriver.InsertParams, owner *string, places []int) (map[string]bool, uint64, error) {
	sub := *p
	sub.Rows = make([]outboxdriver.InsertRow, len(places))
	keys := make(array[text], len(places))
	for j, i := range places {
		sub.Rows[j], keys[j] = p.Rows[i], text(p.Rows[i].IdempotencyKey)
	}
	rows, err := tx.Query(ctx, sql, insertArgs(&sub, owner, keys)...)
	if err != nil {
		return nil, 0, d.insertError(err)
	}
	inserted := make(map[string]bool, len(places))
	var (
		id   string
		mark int64
		last uint64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &mark}, func() error {
		inserted[id], last = true, max(last, uint64(mark))
		return nil
	})
	if err != nil {
		return nil, 0, d.insertError(err)
	}
	return inserted, last, nil
}

// keyHolders returns the event ids of the rows holding the topics and
// idempotency keys of rows at places, by place; a key nobody holds any
// more is missing.
func (d *driver) keyHolders(ctx context.Context, tx pgx.Tx, rows []outboxdriver.InsertRow, places []int) (map[int]string, error) {
	if len(places) == 0 {
		return nil, nil
	}
	topics, keys := make(array[text], len(places)), make(array[text], len(places))
	for j, i := range places {
		topics[j], keys[j] = text(rows[i].Topic), text(rows[i].IdempotencyKey)
	}
	result, err := tx.Query(ctx, d.t.sql.keyHolders, topics, keys)
	if err != nil {
		return nil, fmt.Errorf("postgres: look up %d idempotency keys: %w", len(places), err)
	}
	holders := make(map[int]string, len(places))
	var (
		at int64
		id string
	)
	_, err = pgx.ForEachRow(result, []any{&at, &id}, func() error {
		holders[places[at-1]] = id
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: look up %d idempotency keys: %w", len(places), err)
	}
	return holders, nil
}

// insertError wraps the error of an insert, returned by Insert or, for an
// insert a pipelineTx held back, by the statement it went with.
func (d *driver) insertError(err error) error {
	if isUniqueViolation(err) {
		return fmt.Errorf("postgres: insert into %s: %w: %w", d.t.qualified, outbox.ErrDuplicateEvent, err)
	}
	return fmt.Errorf("postgres: insert into %s: %w", d.t.qualified, d.t.notMigrated(err))
}

// Kept implements [outboxdriver.Driver]: all of ids when the savepoint
// that wrote them is still part of tx (released, or still open), none when
// it or one it was in rolled back. It asks the server about the
// subtransaction, not the table: an event id written again since, or
// committed by another transaction, does not count.
func (d *driver) Kept(ctx context.Context, tx pgx.Tx, savepoint uint64, ids []string) ([]string, error) {
	if t, ok := tx.(*pipelineTx); ok {
		if savepoint = t.savepointMark(savepoint); savepoint == 0 {
			return ids, nil // written outside any savepoint
		}
	}
	var kept bool
	if err := tx.QueryRow(ctx, sqlKept, strconv.FormatUint(savepoint, 10)).Scan(&kept); err != nil {
		return nil, fmt.Errorf("postgres: status of the savepoint that wrote %d events: %w", len(ids), err)
	}
	if !kept {
		return nil, nil
	}
	return ids, nil
}

// run runs plain, or with hot set hot, the same insert returning the
// savepoint mark.
func (d *driver) run(ctx context.Context, tx pgx.Tx, hot bool, plain, hotSQL string, args []any) (savepoint uint64, err error) {
	if t, ok := tx.(*pipelineTx); ok {
		markSQL := ""
		if hot {
			markSQL = hotSQL
		}
		if mark, held := t.hold(d, plain, markSQL, args); held {
			return mark, nil
		}
	}
	if !hot {
		_, err = tx.Exec(ctx, plain, args...)
		return 0, err
	}
	var mark int64
	err = tx.QueryRow(ctx, hotSQL, args...).Scan(&mark)
	return uint64(mark), err
}

// insertArgs are the parameters of sqlInsert for p's rows, one array per
// column, and with keys those of sqlInsertKeyed.
func insertArgs(p *outboxdriver.InsertParams, owner *string, keys array[text]) []any {
	n := len(p.Rows)
	var (
		ids, types, topics, aggTypes, aggIDs, tenants = make(array[text], n), make(array[text], n), make(array[text], n), make(array[text], n), make(array[text], n), make(array[text], n)
		payloads                                      = make(array[bytea], n)
		isJSON, claimed                               = make([]bool, n), make([]bool, n)
		headers                                       = make([]*string, n)
		occurred, available                           = make(array[timestamptz], n), make(array[timestamptz], n)
	)
	for i := range p.Rows {
		r := &p.Rows[i]
		ids[i], types[i], topics[i] = text(r.ID), text(r.Type), text(r.Topic)
		aggTypes[i], aggIDs[i], tenants[i] = text(r.AggregateType), text(r.AggregateID), text(r.TenantID)
		payloads[i], isJSON[i], claimed[i] = r.Payload, r.PayloadJSON, r.Claimed
		occurred[i], available[i] = timestamptz(r.OccurredAt), timestamptz(r.AvailableAt)
		if r.Headers != "" {
			headers[i] = &r.Headers
		}
	}
	args := []any{p.Now, owner, ids, types, topics, aggTypes, aggIDs, tenants,
		payloads, isJSON, headers, occurred, available, claimed, p.LockedUntil}
	if keys != nil {
		args = append(args, keys)
	}
	return args
}

// nullIfEmpty is s as a parameter, NULL when it is empty.
func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Get implements [outboxdriver.Executor].
func (d *driver) Get(ctx context.Context, id string) (outboxdriver.Row, bool, error) {
	rows, err := d.queryRows(ctx, "get "+id, d.t.sql.get, id)
	if err != nil || len(rows) == 0 {
		return outboxdriver.Row{}, false, err
	}
	return rows[0], true, nil
}

// Claim implements [outboxdriver.Executor] with FOR UPDATE SKIP LOCKED.
func (d *driver) Claim(ctx context.Context, p *outboxdriver.ClaimParams) ([]outboxdriver.Row, error) {
	args := []any{p.Now, p.CreatedBefore, p.LockedUntil, p.Limit, p.Owner, p.Topic}
	runs := p.Ordered && p.RunLength > 1
	var sql string
	switch {
	case len(p.Aggregates) > 0:
		n := len(p.Aggregates)
		types, ids, bounds := make(array[text], n), make(array[text], n), make([]int64, n)
		for i, a := range p.Aggregates {
			types[i], ids[i], bounds[i] = text(a.Type), text(a.ID), math.MaxInt64
			if len(p.AggregateBounds) == n {
				bounds[i] = p.AggregateBounds[i]
			}
		}
		sql, args = pick(runs, d.t.sql.claimRunsOf, d.t.sql.claimHeads), append(args, types, ids, bounds)
	case p.Ordered && p.After != nil:
		sql = pick(runs, d.t.sql.claimRunsAfter, d.t.sql.claimOrderedAfter)
		args = append(args, p.After.Topic, p.After.AggregateType, p.After.Keyless, p.After.Key)
	case p.Ordered:
		sql = pick(runs, d.t.sql.claimRuns, d.t.sql.claimOrdered)
	case p.After != nil:
		sql, args = d.t.sql.claimAfter, append(args, p.After.DueAt, p.After.ID)
	default:
		sql = d.t.sql.claim
	}
	capacity := p.Limit
	if runs {
		capacity = max(p.RunRows, p.Limit)
		args = append(args, p.RunLength-1, capacity)
	}
	rows, err := d.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim: %w", d.t.notMigrated(err))
	}
	claimed, err := collect(rows, capacity, runs)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim: %w", d.t.notMigrated(err))
	}
	return claimed, nil
}

// pick returns a if cond, else b.
func pick(cond bool, a, b string) string {
	if cond {
		return a
	}
	return b
}

// Release implements [outboxdriver.Executor].
func (d *driver) Release(ctx context.Context, p outboxdriver.ReleaseParams) (int64, error) {
	tag, err := d.db.Exec(ctx, d.t.sql.release, p.IDs, p.Owner)
	if err != nil {
		return 0, fmt.Errorf("postgres: release %d claims: %w", len(p.IDs), err)
	}
	return tag.RowsAffected(), nil
}

// ReleaseOwned implements [outboxdriver.Executor], in one statement.
func (d *driver) ReleaseOwned(ctx context.Context, p outboxdriver.ReleaseOwnedParams) (int64, error) {
	tag, err := d.db.Exec(ctx, d.t.sql.releaseOwned, p.Topic, p.Owner, p.ClaimedBefore)
	if err != nil {
		return 0, fmt.Errorf("postgres: release the claims of %s on %s: %w", p.Owner, p.Topic, err)
	}
	return tag.RowsAffected(), nil
}

// MarkDone implements [outboxdriver.Executor], deleting the rows under
// [Config.DeleteDone].
func (d *driver) MarkDone(ctx context.Context, p outboxdriver.MarkDoneParams) (int64, error) {
	ids := textArray(p.IDs)
	query, args := d.t.sql.markDone, []any{p.Now, ids}
	if d.t.sql.deleteDone != "" {
		query, args = d.t.sql.deleteDone, []any{ids}
	}
	tag, err := d.db.Exec(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("postgres: record %d events done: %w", len(p.IDs), err)
	}
	return tag.RowsAffected(), nil
}

// RecordOutcomes implements [outboxdriver.Executor] in one statement.
func (d *driver) RecordOutcomes(ctx context.Context, p outboxdriver.RecordOutcomesParams) (int64, error) {
	n := len(p.Outcomes)
	ids, statuses, spent := make(array[text], n), make([]int16, n), make([]int32, n)
	nextAt, errs, groups, before := make([]*time.Time, n), make(array[text], n), make(array[text], n), make([]*int32, n)
	for i := range p.Outcomes {
		o := &p.Outcomes[i] // not a copy: a copy's NextAt taken by address would be allocated for every event
		ids[i], statuses[i], errs[i], groups[i] = text(o.ID), o.Status, text(o.Error), text(o.ErrorGroup)
		if o.AttemptSpent {
			spent[i] = 1
		}
		if !o.NextAt.IsZero() {
			nextAt[i] = &o.NextAt
		}
		if o.AttemptsChecked {
			before[i] = new(int32(o.AttemptsBefore))
		}
	}
	tag, err := d.db.Exec(ctx, d.t.sql.updateStatus, p.Now, ids, statuses, spent, nextAt, errs, p.Owner, before, groups)
	if err != nil {
		return 0, fmt.Errorf("postgres: update status of %d events: %w", n, err)
	}
	return tag.RowsAffected(), nil
}

// QueryDead implements [outboxdriver.Executor].
func (d *driver) QueryDead(ctx context.Context, p outboxdriver.QueryDeadParams) ([]outboxdriver.Row, error) {
	return d.queryRows(ctx, "query dead events", d.t.sql.queryDead, append(deadArgs(p.Filter), p.After, p.Limit)...)
}

// CountDead implements [outboxdriver.Executor].
func (d *driver) CountDead(ctx context.Context, f outboxdriver.DeadFilter) (int64, error) {
	var n int64
	if err := d.db.QueryRow(ctx, d.t.sql.countDead, deadArgs(f)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: count dead events: %w", err)
	}
	return n, nil
}

// ReplayDead implements [outboxdriver.Executor].
func (d *driver) ReplayDead(ctx context.Context, p outboxdriver.ReplayDeadParams) (int64, error) {
	tag, err := d.db.Exec(ctx, d.t.sql.replayDead, append(deadArgs(p.Filter), p.Now)...)
	if err != nil {
		return 0, fmt.Errorf("postgres: replay dead events: %w", err)
	}
	return tag.RowsAffected(), nil
}

// deadArgs are the parameters of sqlDeadFilter.
func deadArgs(f outboxdriver.DeadFilter) []any {
	var diedBefore, diedAfter *time.Time
	if !f.DiedBefore.IsZero() {
		diedBefore = &f.DiedBefore
	}
	if !f.DiedAfter.IsZero() {
		diedAfter = &f.DiedAfter
	}
	contains := ""
	if f.ErrorContains != "" {
		contains = codec.Contains(f.ErrorContains)
	}
	// pgx sends nil IDs as NULL (no id filter) and empty ones as an empty
	// array, which no event_id is in.
	args := make([]any, deadFilterParams, deadFilterParams+2)
	copy(args, []any{f.IDs, f.EventType, f.Topic, diedBefore, f.AggregateType, f.AggregateID,
		contains, f.Group, f.Ungrouped, diedAfter})
	return args
}

// PurgeDeadBatch implements [outboxdriver.Executor]. It passes over rows
// that another transaction holds locked.
func (d *driver) PurgeDeadBatch(ctx context.Context, p outboxdriver.PurgeDeadParams) (int64, error) {
	tag, err := d.db.Exec(ctx, d.t.sql.purgeDead, append(deadArgs(p.Filter), p.Limit)...)
	if err != nil {
		return 0, fmt.Errorf("postgres: purge dead events of %s: %w", d.t.qualified, err)
	}
	return tag.RowsAffected(), nil
}

// DeadGroups implements [outboxdriver.Executor] in one statement.
func (d *driver) DeadGroups(ctx context.Context, p outboxdriver.DeadGroupsParams) ([]outboxdriver.DeadGroup, error) {
	rows, err := d.db.Query(ctx, d.t.sql.deadGroups, append(deadArgs(p.Filter), p.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("postgres: dead event groups: %w", err)
	}
	groups, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxdriver.DeadGroup, error) {
		var g outboxdriver.DeadGroup
		err := row.Scan(&g.Group, &g.Count, &g.FirstDied, &g.LastDied, &g.Topics, &g.SampleError)
		slices.Sort(g.Topics) // byte order, whatever the database's collation
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: dead event groups: %w", err)
	}
	return groups, nil
}

// Stats implements [outboxdriver.Executor] in four statements: the
// counts by topic and status, the claims, the heartbeats and the log
// slots.
func (d *driver) Stats(ctx context.Context, p outboxdriver.StatsParams) (outboxdriver.StatsResult, error) {
	var res outboxdriver.StatsResult
	topics := d.t.sql.statsTopics
	if p.PendingOnly {
		topics = d.t.sql.statsPending
	}
	rows, err := d.db.Query(ctx, topics, p.Now)
	if err == nil {
		res.Topics, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxdriver.TopicStatus, error) {
			var (
				ts     outboxdriver.TopicStatus
				oldest *time.Time
			)
			err := row.Scan(&ts.Topic, &ts.Status, &ts.Count, &oldest)
			if oldest != nil {
				ts.OldestDue = *oldest
			}
			return ts, err
		})
	}
	if err != nil {
		return res, fmt.Errorf("postgres: stats of %s: %w", d.t.qualified, err)
	}
	if p.PendingOnly {
		return res, nil
	}
	rows, err = d.db.Query(ctx, d.t.sql.statsClaims, p.Now)
	if err == nil {
		res.Claims, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxdriver.OwnerClaims, error) {
			var (
				c        outboxdriver.OwnerClaims
				lockedAt *time.Time
			)
			err := row.Scan(&c.Owner, &c.Topic, &c.Events, &lockedAt, &c.LeaseEnds)
			if lockedAt != nil {
				c.OldestClaim = *lockedAt
			}
			return c, err
		})
	}
	if err != nil {
		return res, fmt.Errorf("postgres: claims on %s: %w", d.t.qualified, err)
	}
	rows, err = d.db.Query(ctx, d.t.sql.statsRelays, outboxdriver.HeartbeatPattern)
	if err == nil {
		res.Relays, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxdriver.RelayHeartbeat, error) {
			var r outboxdriver.RelayHeartbeat
			err := row.Scan(&r.Owner, &r.Until)
			return r, err
		})
	}
	if err != nil {
		return res, fmt.Errorf("postgres: relay heartbeats of %s: %w", d.t.qualified, err)
	}
	res.Slots, err = d.LogSlots(ctx)
	return res, err
}

// QueryPending implements [outboxdriver.Executor].
func (d *driver) QueryPending(ctx context.Context, p outboxdriver.QueryPendingParams) ([]outboxdriver.Row, error) {
	return d.queryRows(ctx, "query pending events", d.t.sql.queryPending, p.Statuses, p.Topic, p.After, p.Limit)
}

// QueryEvents implements [outboxdriver.Executor].
func (d *driver) QueryEvents(ctx context.Context, p outboxdriver.QueryEventsParams) ([]outboxdriver.Row, error) {
	return d.queryRows(ctx, "query events", d.t.sql.queryEvents, p.After, p.Limit)
}

// QueryAggregate implements [outboxdriver.Executor].
func (d *driver) QueryAggregate(ctx context.Context, p outboxdriver.QueryAggregateParams) ([]outboxdriver.Row, error) {
	if p.Before == nil {
		return d.queryRows(ctx, "query aggregate", d.t.sql.queryAggregate, p.ID, p.Type, p.Topic, p.Limit)
	}
	return d.queryRows(ctx, "query aggregate", d.t.sql.queryAggregateBefore, p.ID, p.Type, p.Topic, p.Limit, p.Before.CreatedAt, p.Before.ID)
}

// AcquireLease implements [outboxdriver.Executor] in one statement.
func (d *driver) AcquireLease(ctx context.Context, p outboxdriver.LeaseParams) (bool, error) {
	var held bool
	err := d.db.QueryRow(ctx, d.t.sql.acquireLease, p.Name, p.Owner, p.Now, p.Until).Scan(&held)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("postgres: lease %s: %w", p.Name, err)
	}
	return held, nil
}

// Heartbeat implements [outboxdriver.Executor]: a renewal, and an insert
// when it found no row.
func (d *driver) Heartbeat(ctx context.Context, p outboxdriver.HeartbeatParams) (bool, error) {
	name := outboxdriver.HeartbeatName(p.Owner)
	tag, err := d.db.Exec(ctx, d.t.sql.heartbeatRenew, name, p.Owner, p.Until)
	if err == nil && tag.RowsAffected() == 0 {
		_, err = d.db.Exec(ctx, d.t.sql.heartbeatInsert, name, p.Owner, p.Until)
	}
	if err != nil {
		return false, fmt.Errorf("postgres: heartbeat of %s: %w", p.Owner, d.t.notMigrated(err))
	}
	return tag.RowsAffected() > 0, nil
}

// ReleaseDeadRelays implements [outboxdriver.Executor]: a read of the
// expired heartbeats, then one statement per relay.
func (d *driver) ReleaseDeadRelays(ctx context.Context, p outboxdriver.ReleaseDeadRelaysParams) ([]outboxdriver.ReleasedRelay, error) {
	rows, err := d.db.Query(ctx, d.t.sql.expiredHeartbeats, outboxdriver.HeartbeatPattern, p.Now, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: find dead relays: %w", err)
	}
	type heartbeat struct{ name, owner string }
	expired, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (heartbeat, error) {
		var h heartbeat
		err := row.Scan(&h.name, &h.owner)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: find dead relays: %w", err)
	}
	var released []outboxdriver.ReleasedRelay
	for _, h := range expired {
		r, won, err := d.releaseDeadRelay(ctx, h.name, p.Now)
		if err != nil {
			return released, fmt.Errorf("postgres: release the claims of dead relay %s: %w", h.owner, err)
		}
		if won {
			released = append(released, r)
		}
	}
	return released, nil
}

// releaseDeadRelay runs sqlReleaseDeadRelay for heartbeat name, and
// reports whether its delete won.
func (d *driver) releaseDeadRelay(ctx context.Context, name string, now time.Time) (outboxdriver.ReleasedRelay, bool, error) {
	var r outboxdriver.ReleasedRelay
	rows, err := d.db.Query(ctx, d.t.sql.releaseDeadRelay, name, now)
	if err != nil {
		return r, false, err
	}
	var (
		topic *string
		n     int64
		won   bool
	)
	_, err = pgx.ForEachRow(rows, []any{&r.Owner, &topic, &n}, func() error {
		won = true
		if topic != nil {
			r.Topics = append(r.Topics, *topic)
			r.Events += n
		}
		return nil
	})
	return r, won, err
}

// EndHeartbeat implements [outboxdriver.Executor].
func (d *driver) EndHeartbeat(ctx context.Context, owner string) error {
	if _, err := d.db.Exec(ctx, d.t.sql.endHeartbeat, outboxdriver.HeartbeatName(owner), owner); err != nil {
		return fmt.Errorf("postgres: end the heartbeat of %s: %w", owner, err)
	}
	return nil
}

// Backlog implements [outboxdriver.Executor].
func (d *driver) Backlog(ctx context.Context, topic string) (int64, time.Time, error) {
	var (
		n      int64
		oldest *time.Time
	)
	if err := d.db.QueryRow(ctx, d.t.sql.backlog, topic).Scan(&n, &oldest); err != nil {
		return 0, time.Time{}, fmt.Errorf("postgres: backlog of %s: %w", topic, err)
	}
	if oldest == nil {
		return n, time.Time{}, nil
	}
	return n, *oldest, nil
}

// PurgeBatch implements [outboxdriver.Executor]. It passes over rows that
// another transaction holds locked.
func (d *driver) PurgeBatch(ctx context.Context, p outboxdriver.PurgeParams) (int64, error) {
	tag, err := d.db.Exec(ctx, d.t.sql.purge, p.Statuses, p.Before, p.Limit)
	if err != nil {
		return 0, fmt.Errorf("postgres: purge %s: %w", d.t.qualified, err)
	}
	return tag.RowsAffected(), nil
}

// queryRows runs a statement returning eventColumns; op names it in
// errors.
func (d *driver) queryRows(ctx context.Context, op, sql string, args ...any) ([]outboxdriver.Row, error) {
	rows, err := d.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", op, err)
	}
	result, err := collectRows(rows, 0)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", op, err)
	}
	return result, nil
}

// isUniqueViolation reports a duplicate event id.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}
