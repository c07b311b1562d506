package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/wmoutbox/wmoutbox/internal/ident"
	"github.com/wmoutbox/wmoutbox/internal/migrationfiles"
	"github.com/wmoutbox/wmoutbox/internal/nilcheck"
	"github.com/wmoutbox/wmoutbox/outbox"
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
	// Clock stamps created/updated/done times and decides what is due.
	// Default [outbox.SystemClock].
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

// Store is the PostgreSQL outbox store on pgx: an [outbox.TxStore] for
// pgx.Tx. It is safe for concurrent use.
type Store struct {
	db     DB
	clock  outbox.Clock
	logger *slog.Logger
	t      *table
}

var _ outbox.TxStore[pgx.Tx] = (*Store)(nil)

// table is a validated table name and the SQL rendered for it.
type table struct {
	name      string
	schema    string
	qualified string
	inbox     string // the inbox table, qualified
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
		return nil, fmt.Errorf("postgres: table: %w", err)
	}
	if cfg.Schema != "" {
		if err := ValidateIdentifier(cfg.Schema, maxSchemaLen); err != nil {
			return nil, fmt.Errorf("postgres: schema: %w", err)
		}
	}
	t := &table{name: name, schema: cfg.Schema}
	t.qualified, t.inbox = t.qualify(name), t.qualify(name+migrationfiles.InboxSuffix)
	t.sql = renderStatements(cfg.Schema, t.qualified, t.inbox, cfg.SynchronousBookkeeping, cfg.DeleteDone)
	return t, nil
}

// NewStore returns a store on db, usually a *pgxpool.Pool. Claims, status
// updates and operator queries run on db; inserts run in the transaction
// given to [Store.Insert]. It does not touch the database: run [Migrate]
// first.
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
	return &Store{db: db, clock: outbox.ClockOrSystem(cfg.Clock), logger: cmp.Or(cfg.Logger, slog.Default()), t: t}, nil
}

// InTx runs fn in a transaction on the store's database, commits, and then
// runs the after-commit hooks registered during fn (see [outbox.RunInTx]).
// It returns fn's error, the begin or commit error, the error of a check
// before the commit, or ctx's cause when ctx ended before the commit.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return InTx(ctx, s.db, s.logger, fn)
}

// InTx runs fn in a transaction begun on db as [outbox.RunInTx] does:
// commit when fn returns nil, roll back otherwise, and after a commit run
// the hooks fn registered with [outbox.AfterCommit]; their failures go to
// logger (nil: slog.Default()). The context given to fn carries tx, so an
// outbox Watermill publisher given that context writes in it.
//
// When db is a pgx.Tx, tx is a savepoint in it, and the hooks wait for
// db's commit: they run after it when an InTx running db is in ctx, and
// are not taken otherwise (the events then go to the pollers).
//
// When db is a *pgxpool.Pool or a *pgx.Conn, tx spends as few round trips
// as it can: it holds its BEGIN and the events written in it back until it
// sends something else, and sends them with that in one round trip (pgx's
// [pgx.Batch.BeginTx]): with the COMMIT most often, or just before a
// statement of fn's, which goes on its own, as pgx sends it. An event then
// costs its transaction no round trip of its own, and a transaction that
// writes events alone takes one. Statements still run in the order fn made them, so a
// query after an event sees it; but an event's insert error, such as
// [outbox.ErrDuplicateEvent], is returned by the statement after it, or by
// InTx from the commit. From a savepoint (tx.Begin, a nested InTx, or a
// statement that begins with SAVEPOINT) on, events are written at once,
// so that a write's error comes from the write, for the savepoint to undo;
// and from a call of tx.Conn or tx.LargeObjects on, whose statements tx
// does not see. tx is not a *pgxpool.Tx, and ends with InTx: a later call
// fails with pgx.ErrTxClosed.
func InTx(ctx context.Context, db DB, logger *slog.Logger, fn func(ctx context.Context, tx pgx.Tx) error) error {
	funcs := outbox.TxFuncs[pgx.Tx]{
		Begin: func(ctx context.Context) (pgx.Tx, error) {
			if tx, ok, err := beginPipeline(ctx, db); ok {
				return tx, err
			}
			return db.Begin(ctx)
		},
		Commit:   func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) },
		Rollback: func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) },
	}
	if outer, ok := db.(pgx.Tx); ok {
		funcs.Within = outer
	}
	return outbox.RunInTx(ctx, funcs, logger, fn)
}

// Insert implements [outbox.Inserter]: one statement for any number of
// events, run in tx, which with hot events also tells whether a savepoint
// holds the rows (from their xmin, which the writing role must be allowed
// to read: GRANT SELECT (xmin) at least). Events must come from
// [outbox.Prepare] (the [outbox.Writer] does this).
func (s *Store) Insert(ctx context.Context, tx pgx.Tx, hot, cold []outbox.Envelope, lease outbox.Lease) (savepoint uint64, err error) {
	if tx == nil {
		return 0, outbox.ErrNoTransaction
	}
	if len(hot)+len(cold) == 0 {
		return 0, nil
	}
	if lease.Duration <= 0 {
		lease.Duration = outbox.DefaultLockTimeout
	}
	now := s.clock.Now()
	var owner *string // nil: the rows are written unclaimed
	if lease.Owner != "" {
		owner = &lease.Owner
	}
	until := now.Add(lease.Duration)
	rows, withHot := outbox.InsertRows(hot, cold, lease), len(hot) > 0
	if n := len(hot) + len(cold); n == 1 {
		for e, claimed := range rows {
			savepoint, err = s.insertOne(ctx, tx, e, claimed, withHot, now, owner, until)
		}
	} else {
		savepoint, err = s.insertMany(ctx, tx, rows, n, withHot, now, owner, until)
	}
	if err != nil {
		return 0, s.insertError(err)
	}
	return savepoint, nil
}

// insertError wraps the error of an insert, returned by Insert or, for an
// insert a pipelineTx held back, by the statement it went with.
func (s *Store) insertError(err error) error {
	if isUniqueViolation(err) {
		return fmt.Errorf("postgres: insert into %s: %w: %w", s.t.qualified, outbox.ErrDuplicateEvent, err)
	}
	return fmt.Errorf("postgres: insert into %s: %w", s.t.qualified, err)
}

// Kept implements [outbox.Inserter]: all of ids when the savepoint that
// wrote them is still part of tx (released, or still open), none when it
// or one it was in rolled back. It asks the server about the
// subtransaction, not the table: an event id written again since, or
// committed by another transaction, does not count.
func (s *Store) Kept(ctx context.Context, tx pgx.Tx, savepoint uint64, ids []string) ([]string, error) {
	if tx == nil {
		return nil, outbox.ErrNoTransaction
	}
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

// insertOne inserts e with sqlInsertOne: most business transactions write
// one event, which takes scalars, not arrays. A claimed row is written
// claimed by owner until until. With hot set it returns the savepoint
// mark.
func (s *Store) insertOne(ctx context.Context, tx pgx.Tx, e *outbox.Envelope, claimed, hot bool, now time.Time, owner *string, until time.Time) (savepoint uint64, err error) {
	r, err := newRow(e, now)
	if err != nil {
		return 0, err
	}
	return s.run(ctx, tx, hot, s.t.sql.insertOne, s.t.sql.insertOneHot, []any{now, owner, e.ID, string(e.Type), e.Topic,
		string(e.AggregateType), e.AggregateID, e.TenantID, e.Payload(), e.IsJSON(), r.headers, e.OccurredAt, r.available, claimed, until})
}

// run runs plain, or with hot set hot, the same insert returning the
// savepoint mark.
func (s *Store) run(ctx context.Context, tx pgx.Tx, hot bool, plain, hotSQL string, args []any) (savepoint uint64, err error) {
	if t, ok := tx.(*pipelineTx); ok {
		markSQL := ""
		if hot {
			markSQL = hotSQL
		}
		if mark, held := t.hold(s, plain, markSQL, args); held {
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

// insertMany inserts the n rows with sqlInsert, one array per column,
// claimed as insertOne claims.
func (s *Store) insertMany(ctx context.Context, tx pgx.Tx, rows iter.Seq2[*outbox.Envelope, bool], n int, hot bool, now time.Time, owner *string, until time.Time) (savepoint uint64, err error) {
	var (
		ids, types, topics, aggTypes, aggIDs, tenants = make(array[text], n), make(array[text], n), make(array[text], n), make(array[text], n), make(array[text], n), make(array[text], n)
		payloads                                      = make(array[bytea], n)
		isJSON, claimed                               = make([]bool, n), make([]bool, n)
		headers                                       = make([]*string, n)
		occurred, available                           = make(array[timestamptz], n), make(array[timestamptz], n)
	)
	i := 0
	for e, claim := range rows {
		r, err := newRow(e, now)
		if err != nil {
			return 0, err
		}
		ids[i], types[i], topics[i] = text(e.ID), text(e.Type), text(e.Topic)
		aggTypes[i], aggIDs[i], tenants[i] = text(e.AggregateType), text(e.AggregateID), text(e.TenantID)
		payloads[i], isJSON[i] = e.Payload(), e.IsJSON()
		headers[i], occurred[i], available[i], claimed[i] = r.headers, timestamptz(e.OccurredAt), timestamptz(r.available), claim
		i++
	}
	return s.run(ctx, tx, hot, s.t.sql.insert, s.t.sql.insertHot, []any{now, owner, ids, types, topics, aggTypes, aggIDs, tenants,
		payloads, isJSON, headers, occurred, available, claimed, until})
}

// row is what the store computes for an event's row: its stored headers
// (nil: NULL) and when it is due.
type row struct {
	headers   *string
	available time.Time
}

// newRow computes e's row.
func newRow(e *outbox.Envelope, now time.Time) (row, error) {
	var r row
	h, err := outbox.EncodeHeaders(e.Headers)
	if err != nil {
		return r, err
	}
	if h != nil {
		text := string(h)
		r.headers = &text
	}
	r.available = now
	if e.DeliverAfter.After(now) {
		r.available = e.DeliverAfter
	}
	return r, nil
}

// Get implements [outbox.Store].
func (s *Store) Get(ctx context.Context, id string) (outbox.Event, error) {
	events, err := s.queryEvents(ctx, "get "+id, s.t.sql.get, id)
	if err != nil {
		return outbox.Event{}, err
	}
	if len(events) == 0 {
		return outbox.Event{}, fmt.Errorf("%w: %s", outbox.ErrNotFound, id)
	}
	return events[0], nil
}

// Claim implements [outbox.Store] with FOR UPDATE SKIP LOCKED.
func (s *Store) Claim(ctx context.Context, req outbox.ClaimRequest) ([]outbox.Event, error) {
	req, err := req.Normalize()
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	ordered := 0
	if req.Ordered {
		ordered = 1
	}
	args := []any{now, now.Add(-req.SkipRecent), now.Add(req.LockTimeout), req.Limit, req.Owner}
	if len(req.Aggregates) > 0 {
		n := len(req.Aggregates)
		topics, types, ids := make(array[text], n), make(array[text], n), make(array[text], n)
		for i, a := range req.Aggregates {
			topics[i], types[i], ids[i] = text(a.Topic), text(a.Type), text(a.ID)
		}
		events, _, err := s.claim(ctx, s.t.sql.claimHeads, req, append(args, topics, types, ids))
		return events, err
	}
	variants := s.t.sql.claim[ordered]
	if !req.Cursor.IsZero() {
		variants = s.t.sql.claimAfter[ordered]
	}
	sql, topicArg := topicVariant(variants, req.Topics)
	if topicArg != nil {
		args = append(args, topicArg)
	}
	if c := req.Cursor; !c.IsZero() && req.Ordered {
		keyless, key := outbox.AggregateKey(c.AggregateID, c.ID)
		args = append(args, c.Topic, c.AggregateType, keyless, key)
	} else if !c.IsZero() {
		args = append(args, c.DueAt, c.ID)
	}
	events, last, err := s.claim(ctx, sql, req, args)
	if req.Cursor != nil && len(events) > 0 {
		*req.Cursor = last
	}
	return events, err
}

// claim runs a claim statement and returns the events it claimed, in due
// order, and the cursor after them.
func (s *Store) claim(ctx context.Context, sql string, req outbox.ClaimRequest, args []any) ([]outbox.Event, outbox.ClaimCursor, error) {
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, outbox.ClaimCursor{}, fmt.Errorf("postgres: claim: %w", err)
	}
	events, last, err := collectClaimed(rows, req.Limit, req.Ordered)
	if err != nil {
		return nil, outbox.ClaimCursor{}, fmt.Errorf("postgres: claim: %w", err)
	}
	return events, last, nil
}

// PollPending implements [outbox.Store].
func (s *Store) PollPending(ctx context.Context, req outbox.PollRequest) ([]outbox.Event, error) {
	req, err := req.Normalize()
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	sql, topicArg := topicVariant(s.t.sql.poll, req.Topics)
	args := []any{now, now.Add(-req.SkipRecent), req.Limit}
	if topicArg != nil {
		args = append(args, topicArg)
	}
	return s.queryEvents(ctx, "poll", sql, args...)
}

// topicVariant picks the statement for a topic filter and its argument.
func topicVariant(variants [3]string, topics []string) (string, any) {
	switch len(topics) {
	case 0:
		return variants[0], nil
	case 1:
		return variants[1], topics[0]
	}
	return variants[2], topics
}

// Release implements [outbox.Store].
func (s *Store) Release(ctx context.Context, owner string, ids []string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	tag, err := s.db.Exec(ctx, s.t.sql.release, ids, owner)
	if err != nil {
		return 0, fmt.Errorf("postgres: release %d claims: %w", len(ids), err)
	}
	return tag.RowsAffected(), nil
}

// ReleaseOwned implements [outbox.Store], in one statement.
func (s *Store) ReleaseOwned(ctx context.Context, owner, topic string, claimedBefore time.Time) (int64, error) {
	if err := outbox.ValidateReleaseOwned(owner, topic); err != nil {
		return 0, err
	}
	tag, err := s.db.Exec(ctx, s.t.sql.releaseOwned, topic, owner, claimedBefore)
	if err != nil {
		return 0, fmt.Errorf("postgres: release the claims of %s on %s: %w", owner, topic, err)
	}
	return tag.RowsAffected(), nil
}

// UpdateStatus implements [outbox.Store]: one statement for the DONE
// outcomes of the batch (deleting their rows under [Config.DeleteDone])
// and one for the rest. Of several updates of one id, a DONE wins, else
// the last (see [outbox.PrepareUpdates]).
func (s *Store) UpdateStatus(ctx context.Context, owner string, updates ...outbox.StatusUpdate) (int64, error) {
	recordDone := func(ids []string) (int64, error) {
		idArray := textArray(ids)
		query, args := s.t.sql.markDone, []any{s.clock.Now(), idArray}
		if s.t.sql.deleteDone != "" {
			query, args = s.t.sql.deleteDone, []any{idArray}
		}
		tag, err := s.db.Exec(ctx, query, args...)
		if err != nil {
			return 0, fmt.Errorf("postgres: record %d events done: %w", len(ids), err)
		}
		return tag.RowsAffected(), nil
	}
	return outbox.RecordOutcomes(owner, updates, recordDone, func(updates []outbox.StatusUpdate) (int64, error) {
		n := len(updates)
		ids, statuses, spent := make(array[text], n), make([]int16, n), make([]int32, n)
		nextAt, errs, before := make([]*time.Time, n), make(array[text], n), make([]*int32, n)
		for i := range updates {
			u := &updates[i] // not a copy: a copy's NextAt taken by address would be allocated for every event
			ids[i], statuses[i], errs[i] = text(u.ID), int16(u.Status), text(outbox.CutError(u.Error))
			if u.AttemptSpent() {
				spent[i] = 1
			}
			if !u.NextAt.IsZero() {
				nextAt[i] = &u.NextAt
			}
			if attempts, checked := u.AttemptsBefore(); checked {
				before[i] = new(int32(attempts))
			}
		}
		tag, err := s.db.Exec(ctx, s.t.sql.updateStatus, s.clock.Now(), ids, statuses, spent, nextAt, errs, owner, before)
		if err != nil {
			return 0, fmt.Errorf("postgres: update status of %d events: %w", n, err)
		}
		return tag.RowsAffected(), nil
	})
}

// QueryDead implements [outbox.Store].
func (s *Store) QueryDead(ctx context.Context, q outbox.DeadQuery) ([]outbox.Event, error) {
	q, err := q.Normalize()
	if err != nil {
		return nil, err
	}
	return s.queryEvents(ctx, "query dead events", s.t.sql.queryDead, append(deadArgs(q.DeadFilter), q.After, q.Limit)...)
}

// CountDead implements [outbox.Store].
func (s *Store) CountDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	var n int64
	if err := s.db.QueryRow(ctx, s.t.sql.countDead, deadArgs(f)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: count dead events: %w", err)
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
	tag, err := s.db.Exec(ctx, s.t.sql.replayDead, append(deadArgs(f), s.clock.Now())...)
	if err != nil {
		return 0, fmt.Errorf("postgres: replay dead events: %w", err)
	}
	return tag.RowsAffected(), nil
}

func deadArgs(f outbox.DeadFilter) []any {
	var diedBefore *time.Time
	if !f.DiedBefore.IsZero() {
		diedBefore = &f.DiedBefore
	}
	// pgx sends nil IDs as NULL (no id filter) and empty ones as an empty
	// array, which no event_id is in.
	return []any{f.IDs, string(f.EventType), f.Topic, diedBefore}
}

// Backlog implements [outbox.Store].
func (s *Store) Backlog(ctx context.Context, topic string) (int64, time.Time, error) {
	var (
		n      int64
		oldest *time.Time
	)
	if err := s.db.QueryRow(ctx, s.t.sql.backlog, topic).Scan(&n, &oldest); err != nil {
		return 0, time.Time{}, fmt.Errorf("postgres: backlog of %s: %w", topic, err)
	}
	if oldest == nil {
		return n, time.Time{}, nil
	}
	return n, *oldest, nil
}

// Purge implements [outbox.Store].
func (s *Store) Purge(ctx context.Context, req outbox.PurgeRequest) (int64, error) {
	req, err := req.Normalize()
	if err != nil {
		return 0, err
	}
	statuses := make([]int16, len(req.Statuses))
	for i, st := range req.Statuses {
		statuses[i] = int16(st)
	}
	cutoff := s.clock.Now().Add(-req.OlderThan)
	return outbox.PurgeInBatches(req.BatchSize, func(deleted int64) (int64, error) {
		tag, err := s.db.Exec(ctx, s.t.sql.purge, statuses, cutoff, req.BatchSize)
		if err != nil {
			return 0, fmt.Errorf("postgres: purge after %d rows: %w", deleted, err)
		}
		return tag.RowsAffected(), nil
	})
}

// queryEvents runs a statement returning eventColumns; op names it in
// errors.
func (s *Store) queryEvents(ctx context.Context, op, sql string, args ...any) ([]outbox.Event, error) {
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", op, err)
	}
	events, err := collectEvents(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", op, err)
	}
	return events, nil
}

// isUniqueViolation reports a duplicate event id.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}
