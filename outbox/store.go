package outbox

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/internal/nilcheck"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// StoreConfig configures a [Store]. The dialects' constructors fill it in
// from their own Config.
type StoreConfig struct {
	// Clock stamps the times the store writes (created, updated, done,
	// replayed), the writes of a [Writer] on the store, and the cutoff of
	// purges. Default [SystemClock].
	Clock Clock
	// Logger receives the failures of after-commit hooks, which
	// [Store.InTx] logs and does not return. Default slog.Default().
	Logger *slog.Logger
}

// Store is the outbox table of one database, through a dialect's driver:
// [Store.InTx] for business transactions, a [Writer] or a Watermill
// publisher to write events in them, a relay (watermilladapter's
// Subscriber) to deliver them, and the operator queries below. Make one
// with a dialect's NewStore (postgres.NewStore, mysql.NewStore,
// sqlite.NewStore). Tx is the dialect's transaction type: pgx.Tx for
// PostgreSQL, *sql.Tx for the others.
//
// A Store is safe for concurrent use. Its methods validate their input and
// return errors matching [ErrInvalidRequest] for bad input, before any
// statement runs.
type Store[Tx any] struct {
	driver outboxdriver.Driver[Tx]
	clock  Clock
	logger *slog.Logger
}

// Defaults of the queries' limits.
const (
	defaultLockTimeout  = 5 * time.Minute
	defaultDeadLimit    = 100
	defaultPurgeBatch   = 1000
	maxDeadLimit        = 10000
	maxPurgeBatchLength = 100000
)

// NewStore returns a store on driver. Applications call their dialect's
// NewStore, which makes the driver; this is for a dialect's own.
func NewStore[Tx any](driver outboxdriver.Driver[Tx], cfg StoreConfig) (*Store[Tx], error) {
	if nilcheck.Is(driver) {
		return nil, invalidRequest("store needs a driver")
	}
	return &Store[Tx]{driver: driver, clock: clockOrSystem(cfg.Clock), logger: cmp.Or(cfg.Logger, slog.Default())}, nil
}

// Driver returns the store's driver: what a relay (watermilladapter's
// Subscriber) claims and records outcomes through. Applications do not
// need it.
func (s *Store[Tx]) Driver() outboxdriver.Driver[Tx] { return s.driver }

// InTx begins a transaction on the store's database, runs fn in it, and
// commits when fn returns nil; it rolls back when fn returns an error or
// panics (the panic goes on), or when ctx ended before the commit, and
// returns that error, the begin or commit error, or ctx's cause.
//
// After the commit it runs the hooks fn registered with [AfterCommit], in
// order: that is how a [Writer] or a Publisher with a [HotPath] hands the
// events to a relay in this process at once. A hook's failure is logged
// (StoreConfig.Logger), never returned. The context given to fn carries
// tx ([TxFromContext]), so a Watermill publisher given that context (as
// message context) writes in it.
//
// On a store whose database is a transaction (a PostgreSQL store on a
// pgx.Tx), InTx opens a savepoint in it, and the hooks wait for that
// transaction's commit: they run after it when an InTx of a store on that
// transaction's database is running it, and are not taken otherwise.
// The dialects' docs say what else their transactions do.
func (s *Store[Tx]) InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error {
	return runInTx(ctx, s.driver, s.logger, fn)
}

// Check reports whether the store's table is ready: an error matching
// [ErrNotMigrated] (a [*NotMigratedError] that says which migration to
// run) when the table does not exist or is at an older migration than
// this wmoutbox needs, the database's error when it cannot tell, nil
// otherwise. A table migrated by another tool from the plain migration
// files, with no migration recorded, passes when it exists. NewStore
// cannot check (it has no context, and does not touch the database);
// call Check at start, after the dialect's Migrate if you run it.
// watermilladapter's Subscriber checks at its first Subscribe.
func (s *Store[Tx]) Check(ctx context.Context) error {
	if c, ok := s.driver.(outboxdriver.SchemaChecker); ok {
		return c.CheckSchema(ctx)
	}
	return nil
}

// Get returns the event with the given id, or an error matching
// [ErrNotFound].
func (s *Store[Tx]) Get(ctx context.Context, id string) (Event, error) {
	row, found, err := s.driver.Get(ctx, id)
	if err != nil {
		return Event{}, err
	}
	if !found {
		return Event{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return eventOf(&row), nil
}

// DeadFilter selects DEAD events: those that match every field set. Zero
// fields match everything, and a zero filter every DEAD event, which
// [Store.ReplayDead] and [Store.PurgeDead] refuse.
type DeadFilter struct {
	// IDs restricts the filter to these event ids. Nil does not restrict
	// by id; a non-nil empty slice matches no event. Collect the ids a
	// query found into a non-nil slice (make([]string, 0, len(page))), so
	// that a query that found nothing selects nothing.
	IDs []string
	// EventType restricts the filter to one event type.
	EventType EventType
	// Topic restricts the filter to one topic.
	Topic string
	// AggregateType and AggregateID restrict the filter to the events of
	// one aggregate type, or of one aggregate when both are set.
	AggregateType AggregateType
	AggregateID   string
	// ErrorContains keeps only events whose last error contains this text,
	// ignoring case.
	ErrorContains string
	// Group keeps only the events of one failure group ([DeadGroup]);
	// [UngroupedDead] selects those that died before the table recorded
	// groups.
	Group string
	// DiedAfter and DiedBefore keep only events that went DEAD at or after
	// DiedAfter, and before DiedBefore.
	DiedAfter, DiedBefore time.Time
}

// UngroupedDead is the [DeadGroup.Group] of the DEAD events that died
// before the table recorded failure groups (migration 5 on PostgreSQL and
// SQLite, 3 on MySQL).
const UngroupedDead = "ungrouped"

// restricts reports whether f selects less than every DEAD event.
func (f *DeadFilter) restricts() bool {
	return f.IDs != nil || f.EventType != "" || f.Topic != "" || f.AggregateType != "" || f.AggregateID != "" ||
		f.ErrorContains != "" || f.Group != "" || !f.DiedAfter.IsZero() || !f.DiedBefore.IsZero()
}

func (f DeadFilter) driver() outboxdriver.DeadFilter {
	d := outboxdriver.DeadFilter{
		IDs: f.IDs, EventType: string(f.EventType), Topic: f.Topic,
		AggregateType: string(f.AggregateType), AggregateID: f.AggregateID,
		ErrorContains: f.ErrorContains, Group: f.Group,
		DiedAfter: f.DiedAfter, DiedBefore: f.DiedBefore,
	}
	if f.Group == UngroupedDead {
		d.Group, d.Ungrouped = "", true
	}
	return d
}

// DeadQuery pages through DEAD events.
type DeadQuery struct {
	DeadFilter
	// After is the id of the last event of the previous page; "" starts
	// from the beginning.
	After string
	// Limit is the page size. Default 100, at most 10000.
	Limit int
}

// QueryDead lists DEAD events matching q, ordered by event id.
func (s *Store[Tx]) QueryDead(ctx context.Context, q DeadQuery) ([]Event, error) {
	limit, err := normalizeLimit(q.Limit, defaultDeadLimit, maxDeadLimit)
	if err != nil {
		return nil, err
	}
	rows, err := s.driver.QueryDead(ctx, outboxdriver.QueryDeadParams{Filter: q.driver(), After: q.After, Limit: limit})
	if err != nil {
		return nil, err
	}
	return eventsOf(rows), nil
}

// CountDead counts DEAD events matching f.
func (s *Store[Tx]) CountDead(ctx context.Context, f DeadFilter) (int64, error) {
	return s.driver.CountDead(ctx, f.driver())
}

// ReplayDead returns DEAD events matching f to NEW, due at once, with
// attempts reset to zero. last_error is kept as the history of why the
// event died. It returns how many events were replayed. It refuses a
// filter that restricts nothing (IDs nil, every other field zero), as a
// forgotten or lost filter would be, with an error matching
// [ErrInvalidRequest]; to replay every DEAD event, set DiedBefore:
// time.Now(). It wakes no relay: the events are claimed at the relays'
// next poll unless the caller wakes them (a Subscriber's Wake, a
// postgres.Notifier).
func (s *Store[Tx]) ReplayDead(ctx context.Context, f DeadFilter) (int64, error) {
	if !f.restricts() {
		return 0, invalidRequest("replay of dead events with a filter that restricts nothing; " +
			"to replay every DEAD event, set DiedBefore: time.Now()")
	}
	return s.driver.ReplayDead(ctx, outboxdriver.ReplayDeadParams{Filter: f.driver(), Now: s.clock.Now()})
}

// Backlog counts the pending (NEW or RETRY) events of topic, claimed or
// not, and returns the earliest due time among them (in the future when
// all of them wait for a later time), zero when there is none: how long
// the oldest undelivered event has been due.
func (s *Store[Tx]) Backlog(ctx context.Context, topic string) (pending int64, oldest time.Time, err error) {
	return s.driver.Backlog(ctx, topic)
}

// PurgeRequest says which terminal events [Store.Purge] deletes.
type PurgeRequest struct {
	// OlderThan is the retention: events whose status last changed longer
	// ago than this are deleted. Required, positive.
	OlderThan time.Duration
	// BatchSize is the number of rows deleted per transaction. Default
	// 1000, at most 100000.
	BatchSize int
	// Statuses are the terminal statuses to purge. Default DONE and DEAD.
	Statuses []Status
	// Progress, when set, is called after each batch with the number of
	// rows deleted so far.
	Progress func(deleted int64)
}

// Purge deletes terminal events last updated more than req.OlderThan
// ago, in batches of req.BatchSize rows, each its own transaction, until
// a batch comes back short, and returns how many it deleted; on an error,
// those deleted before it. Rows another transaction holds locked (a
// concurrent purge, an operator's open transaction) may be passed over,
// and a batch they make short end the purge early: the next purge deletes
// them.
func (s *Store[Tx]) Purge(ctx context.Context, req PurgeRequest) (int64, error) {
	if err := validateRetention(req.OlderThan); err != nil {
		return 0, err
	}
	batch, err := normalizeLimit(req.BatchSize, defaultPurgeBatch, maxPurgeBatchLength)
	if err != nil {
		return 0, err
	}
	statuses := []int16{int16(StatusDone), int16(StatusDead)}
	if len(req.Statuses) > 0 {
		statuses = make([]int16, len(req.Statuses))
		for i, st := range req.Statuses {
			if !st.Terminal() {
				return 0, invalidRequest("purge of %s rows: only DONE and DEAD can be purged", st)
			}
			statuses[i] = int16(st)
		}
	}
	p := outboxdriver.PurgeParams{Statuses: statuses, Before: s.clock.Now().Add(-req.OlderThan), Limit: batch}
	return purgeInBatches(ctx, "purge", batch, req.Progress, func(ctx context.Context) (int64, error) {
		return s.driver.PurgeBatch(ctx, p)
	})
}

// MarkProcessed implements [Inbox].
func (s *Store[Tx]) MarkProcessed(ctx context.Context, tx Tx, consumer, id string) (bool, error) {
	if nilcheck.Is(tx) {
		return false, ErrNoTransaction
	}
	if reason := codec.CheckRecord(consumer, id); reason != "" {
		return false, invalidRequest("inbox: %s", reason)
	}
	return s.driver.MarkProcessed(ctx, tx, consumer, id, s.clock.Now())
}

// PurgeProcessed implements [Inbox].
func (s *Store[Tx]) PurgeProcessed(ctx context.Context, olderThan time.Duration) (int64, error) {
	return s.purgeProcessed(ctx, olderThan, defaultPurgeBatch)
}

// purgeProcessed is PurgeProcessed in batches of batch rows.
func (s *Store[Tx]) purgeProcessed(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	if err := validateRetention(olderThan); err != nil {
		return 0, err
	}
	p := outboxdriver.PurgeParams{Before: s.clock.Now().Add(-olderThan), Limit: batch}
	return purgeInBatches(ctx, "purge inbox", p.Limit, nil, func(ctx context.Context) (int64, error) {
		return s.driver.PurgeProcessedBatch(ctx, p)
	})
}

// purgeInBatches runs batch, which deletes up to limit rows, until one
// comes back short, reports the running total to progress (when set) after
// each, and returns the total; on an error, the rows deleted before it.
func purgeInBatches(ctx context.Context, op string, limit int, progress func(int64), batch func(context.Context) (int64, error)) (int64, error) {
	var total int64
	for {
		n, err := batch(ctx)
		if err != nil {
			return total, fmt.Errorf("outbox: %s after %d rows: %w", op, total, err)
		}
		total += n
		if progress != nil {
			progress(total)
		}
		if n < int64(limit) {
			return total, nil
		}
	}
}

func validateRetention(olderThan time.Duration) error {
	if olderThan <= 0 {
		return invalidRequest("purge retention must be positive, got %s", olderThan)
	}
	return nil
}

func normalizeLimit(limit, def, maxLimit int) (int, error) {
	switch {
	case limit < 0:
		return 0, invalidRequest("negative limit %d", limit)
	case limit == 0:
		return def, nil
	case limit > maxLimit:
		return 0, invalidRequest("limit %d exceeds %d", limit, maxLimit)
	}
	return limit, nil
}

// eventsOf returns the events of a driver's rows.
func eventsOf(rows []outboxdriver.Row) []Event {
	events := make([]Event, len(rows))
	for i := range rows {
		events[i] = eventOf(&rows[i])
	}
	return events
}

// errorReason returns the failure reason of an event's error: what
// [DeadGroup.Reason] shows.
func errorReason(err string) string {
	_, reason := codec.ErrorGroup(err)
	return reason
}

// eventOf returns the event a driver's row holds. A row whose headers do
// not decode comes back with Malformed set.
func eventOf(r *outboxdriver.Row) Event {
	e := Event{
		Envelope: Envelope{
			ID:             r.ID,
			Type:           EventType(r.Type),
			Topic:          r.Topic,
			OccurredAt:     r.OccurredAt,
			AggregateType:  AggregateType(r.AggregateType),
			AggregateID:    r.AggregateID,
			TenantID:       r.TenantID,
			IdempotencyKey: r.IdempotencyKey,
		},
		Status:      Status(r.Status),
		Attempts:    r.Attempts,
		AvailableAt: r.AvailableAt,
		CreatedAt:   r.CreatedAt,
		UpdatedAt:   r.UpdatedAt,
		DoneAt:      r.DoneAt,
		LastError:   r.LastError,
		ErrorGroup:  r.ErrorGroup,
		LockedBy:    r.LockedBy,
		LockedAt:    r.LockedAt,
		LockedUntil: r.LockedUntil,
		Malformed:   r.Malformed,
	}
	payload := r.Payload
	if payload == nil {
		payload = []byte{}
	}
	if r.PayloadJSON {
		e.PayloadJSON = payload
	} else {
		e.PayloadBytes = payload
	}
	headers, err := codec.DecodeHeaders(r.Headers)
	e.Headers = headers
	if e.Malformed == nil {
		e.Malformed = err
	}
	return e
}
