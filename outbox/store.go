package outbox

import (
	"cmp"
	"context"
	"iter"
	"slices"
	"strings"
	"time"
)

// Store is what the relay side needs from a dialect: claiming due events,
// recording outcomes, and the operator queries. Implementations are safe for
// concurrent use and run each call in its own short transaction, outside any
// business transaction (unless made on a transaction: a PostgreSQL store
// whose DB is a pgx.Tx runs every call in it). [outbox/postgres.Store] is
// the PostgreSQL one, [outbox/mysql.Store] the MySQL and MariaDB one,
// [outbox/sqlite.Store] the embedded one.
type Store interface {
	// Get returns the event with the given id, or [ErrNotFound].
	Get(ctx context.Context, id string) (Event, error)

	// Claim locks up to req.Limit due events for req.Owner and returns them
	// in due order. A due event is NEW or RETRY, available (available_at
	// reached), not under a running claim, and older than req.SkipRecent.
	// The claim is a lease: it records the owner, the time and the end of
	// the lease (locked_by, locked_at, locked_until), and the event is due
	// again for any claimer req.LockTimeout later unless its outcome is
	// recorded first. It leaves available_at alone, so that the event keeps
	// its place in due order and a store can rewrite the row in place.
	// Concurrent claimers never receive the same event while its lease
	// runs. With req.Cursor set, the claim may start where the
	// previous claim with that cursor ended, and moves the cursor to its
	// last event (see [ClaimCursor]).
	Claim(ctx context.Context, req ClaimRequest) ([]Event, error)

	// PollPending returns due events without claiming them: the
	// single-instance mode of the specification. Events under a running
	// claim are not due, so they are left out.
	PollPending(ctx context.Context, req PollRequest) ([]Event, error)

	// Release ends owner's claims on the given pending events, which are
	// then due at once, in their place in due order, for any relay. It
	// returns how many claims were released.
	Release(ctx context.Context, owner string, ids []string) (int64, error)

	// ReleaseOwned ends owner's claims made before claimedBefore on the
	// pending events of topic, which are then due at once: the claims of
	// an earlier run of a relay that died holding them, which the relay,
	// started again under the same owner, hands back rather than wait for
	// their leases to end. It returns how many claims were released. An
	// empty owner or topic fails with [ErrInvalidRequest]. A claim made
	// before migration 2 (no locked_until; its available_at moved to the
	// lease's end) is released but stays due at the lease's end.
	ReleaseOwned(ctx context.Context, owner, topic string, claimedBefore time.Time) (int64, error)

	// UpdateStatus records delivery outcomes reported by owner, the relay
	// that claimed the events: the DONE outcomes in one statement, the
	// others in another.
	//
	// DONE applies to every event not DONE already, whoever holds it: the
	// event was delivered. RETRY, DEAD and deferrals apply only to a
	// pending (NEW or RETRY) event that owner still claims, its lease
	// running or run out while no other relay claimed the event since;
	// with owner "", the caller holds no claim, and they apply only to a
	// pending event under no running lease. A RETRY or DEAD that says its
	// attempt ([StatusUpdate.Attempt]) applies only to an event with the
	// failed attempts before it. Any other outcome is stale (a relay
	// slower than its lease, whose event another relay now delivers; an
	// outcome recorded already; an event since DEAD or replayed) and
	// changes nothing: it would clear another relay's lease, revive a
	// DEAD event or count an attempt twice. Every update applied clears
	// the claim. Of several outcomes of one event in one call, a DONE
	// counts, else the last. A store configured to delete delivered events
	// deletes the row instead of marking it DONE. It returns how many rows
	// changed or were deleted.
	UpdateStatus(ctx context.Context, owner string, updates ...StatusUpdate) (int64, error)

	// QueryDead lists DEAD events matching q, ordered by event id. A zero
	// filter lists every DEAD event.
	QueryDead(ctx context.Context, q DeadQuery) ([]Event, error)
	// CountDead counts DEAD events matching f. A zero filter counts every
	// DEAD event.
	CountDead(ctx context.Context, f DeadFilter) (int64, error)
	// ReplayDead returns DEAD events matching f to NEW, due at once, with
	// attempts reset to zero. last_error is kept as the history of why the
	// event died. It returns how many events were replayed. It refuses a
	// filter that restricts nothing ([DeadFilter.ValidateReplay]) with an
	// error matching [ErrInvalidRequest] and changes no row; to replay
	// every DEAD event, set DiedBefore: time.Now(). It wakes no relay: the
	// events are claimed at the relays' next poll unless the caller wakes
	// them.
	ReplayDead(ctx context.Context, f DeadFilter) (int64, error)

	// Backlog counts the pending (NEW or RETRY) events of topic, claimed
	// or not, and returns the earliest AvailableAt among them (in the
	// future when all of them wait for a later time), zero when there is
	// none: how long the oldest undelivered event has been due.
	Backlog(ctx context.Context, topic string) (pending int64, oldest time.Time, err error)

	// Purge deletes terminal events last updated more than req.OlderThan
	// ago, in batches of req.BatchSize rows, each its own transaction, until
	// a batch comes back short. It returns how many rows were deleted.
	// PostgreSQL passes over rows another transaction holds locked (a
	// concurrent purge, an operator's open transaction): a batch they make
	// short ends the purge early, and the next purge deletes them.
	Purge(ctx context.Context, req PurgeRequest) (int64, error)
}

// TxStore is a [Store] that can also write events in a business
// transaction of type Tx (pgx.Tx for PostgreSQL).
type TxStore[Tx any] interface {
	Store
	Inserter[Tx]

	// InTx begins a transaction on the store's database and runs fn as
	// [RunInTx] does: commit when fn returns nil, then after-commit hooks.
	InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error
}

// Inserter writes events in a business transaction of type Tx.
type Inserter[Tx any] interface {
	// Insert writes envelopes prepared by [Prepare] in tx, in as few
	// statements as the store can: the hot ones, which the writing process
	// delivers on its hot path after commit, already claimed by lease.Owner,
	// so that no other relay takes them meanwhile (the claim expires like any
	// other), and the cold ones unclaimed, for the relays' claims. With the
	// zero lease, or for an event with a DeliverAfter time, no row is written
	// claimed. Insert writes every event or, when it fails, none, and does not
	// commit.
	//
	// It returns 0 when the hot rows went into the top-level transaction,
	// outside any savepoint, or there is none; otherwise a mark of the
	// write for Kept: a savepoint holds the rows (tx is one, or one opened
	// on tx was still open), which can roll back while the transaction
	// commits, or the store cannot tell.
	Insert(ctx context.Context, tx Tx, hot, cold []Envelope, lease Lease) (savepoint uint64, err error)

	// Kept returns those of ids, the hot events of an Insert that returned
	// savepoint, that are still that write's in tx, in any order: a
	// [Writer] asks, in the top-level transaction just before its commit,
	// which events written in savepoints survived them.
	Kept(ctx context.Context, tx Tx, savepoint uint64, ids []string) ([]string, error)
}

// Lease is a claim on events: who holds it and for how long. Claims are
// leases: a claimed event is due again when its lease runs out, unless its
// outcome was recorded first. The zero Lease is no claim.
type Lease struct {
	// Owner identifies the relay holding the claim, at most [MaxOwnerLen]
	// characters.
	Owner string
	// Duration is how long the claim holds. Default [DefaultLockTimeout].
	Duration time.Duration
}

// InsertRows is how a dialect's Insert walks its events: those of hot,
// then those of cold, each with whether its row is written claimed by
// lease.Owner. Only hot events are, under a lease with an owner, and
// never a delayed one: its claim would run out before it is due.
func InsertRows(hot, cold []Envelope, lease Lease) iter.Seq2[*Envelope, bool] {
	return func(yield func(*Envelope, bool) bool) {
		for i := range hot {
			if !yield(&hot[i], lease.Owner != "" && hot[i].DeliverAfter.IsZero()) {
				return
			}
		}
		for i := range cold {
			if !yield(&cold[i], false) {
				return
			}
		}
	}
}

// Default values of the request fields whose zero value means "default".
const (
	DefaultClaimLimit   = 50
	DefaultLockTimeout  = 5 * time.Minute
	DefaultDeadLimit    = 100
	DefaultPurgeBatch   = 1000
	maxRequestLimit     = 10000
	maxPurgeBatchLength = 100000
)

// ClaimRequest selects the events [Store.Claim] locks.
type ClaimRequest struct {
	// Owner identifies the claiming relay; required, at most [MaxOwnerLen]
	// characters.
	Owner string
	// Limit caps the number of events claimed. Default [DefaultClaimLimit].
	Limit int
	// LockTimeout is how long the claim (a lease) holds; then the events
	// are due again for any claimer. Default [DefaultLockTimeout].
	LockTimeout time.Duration
	// SkipRecent leaves events written less than this long ago to the hot
	// path. Default 0.
	SkipRecent time.Duration
	// Topics restricts the claim to these topics; empty means all topics.
	Topics []string
	// Cursor, when set, lets the claim start where the previous claim with
	// the same cursor ended, and the store moves it to where this one ends.
	// Default nil: every claim starts from the earliest due event.
	Cursor *ClaimCursor
	// Ordered claims the events of an aggregate one at a time, in the
	// order they were written: an event is left out while an earlier event
	// of its topic and aggregate (AggregateType and AggregateID) is
	// pending, claimed or not, due or not, or DEAD. Events without an
	// AggregateID are not ordered. Which events an ordered claim takes is
	// up to the store: PostgreSQL's go through the aggregates in turn
	// from the cursor, at a cost that does not grow with the events
	// waiting behind others; SQLite's and MySQL's take the earliest due,
	// passing over every waiting event. Default false.
	//
	// Written means inserted: events of one aggregate written by
	// transactions that run at the same time can commit in the other
	// order, and a claim between the two commits takes the later event
	// first. Transactions that change an aggregate normally take turns on
	// its row (an UPDATE locks it); ones that do not, and must keep the
	// order, lock it (SELECT … FOR UPDATE) before writing events.
	Ordered bool
	// Aggregates, with Ordered, narrows the claim to the first events of
	// these aggregates: a relay that knows where an event may have become
	// due (the one before it is DONE, its process just wrote it, its
	// retry is due) names its aggregate, and the claim looks each one up
	// instead of walking the aggregates of its topics, a walk that reads
	// the first event of every aggregate held back by an event in flight,
	// scheduled for later, retried or DEAD. The Cursor is neither read
	// nor moved. PostgreSQL narrows; SQLite's and
	// MySQL's ordered claims, which go through due events rather than
	// aggregates, claim as they would without it. Either way no event is
	// claimed before the earlier ones of its aggregate are DONE. At most
	// Limit aggregates, each with a Topic (one of Topics, when set) and an
	// ID; one without a Type is of [GlobalAggregate], as events are.
	// Default: none.
	Aggregates []Aggregate
}

// Aggregate names the events of one aggregate of a topic: those with this
// Topic, AggregateType and AggregateID.
type Aggregate struct {
	Topic string
	Type  AggregateType
	ID    string
}

// AggregateOf returns the aggregate of e.
func AggregateOf(e Envelope) Aggregate {
	return Aggregate{Topic: e.Topic, Type: e.AggregateType, ID: e.AggregateID}
}

// ClaimCursor is where a run of claims has got to, in due order. It is a hint
// for stores whose index keeps the entries of claimed rows until a vacuum
// (PostgreSQL's B-trees): without it, every claim of a drain walks again over
// the entries its predecessors left, and the k-th claim costs O(k). A store
// may leave out events due before the cursor, so events that became due there
// later (written by a transaction that committed late or by a writer whose
// clock is behind, left by a claim that rolled back) wait until the caller
// resets the cursor: a relay resets it whenever a claim comes back short of
// its limit and, claiming unordered, at least every second. Stores that need
// no cursor ignore it. A cursor is not safe for concurrent use.
//
// Ordered claims go through aggregates in turn rather than in due order,
// and their cursor is the aggregate of the last event claimed, in
// [CompareAggregates] order; a cursor serves claims of one kind.
type ClaimCursor struct {
	// DueAt and ID are the due time and id of the last event claimed;
	// zero before the first claim and after Reset.
	DueAt time.Time
	ID    string
	// Topic, AggregateType and AggregateID are that event's aggregate.
	Topic, AggregateType, AggregateID string
}

// CursorAt returns the cursor of a claim whose last event is e.
func CursorAt(e Event) ClaimCursor {
	return ClaimCursor{DueAt: e.AvailableAt, ID: e.ID, Topic: e.Topic,
		AggregateType: string(e.AggregateType), AggregateID: e.AggregateID}
}

// CompareDue orders events as [Store.Claim] returns them: by due time
// (AvailableAt), then id. For slices.SortFunc.
func CompareDue(a, b Event) int {
	return cmp.Or(a.AvailableAt.Compare(b.AvailableAt), strings.Compare(a.ID, b.ID))
}

// CompareAggregates orders events as ordered claims go through their
// aggregates: by topic, aggregate type, then aggregate id, byte by byte,
// an event without an aggregate id coming after those with one, as an
// aggregate of its own named by its id.
func CompareAggregates(a, b Event) int {
	aKeyless, aKey := AggregateKey(a.AggregateID, a.ID)
	bKeyless, bKey := AggregateKey(b.AggregateID, b.ID)
	return cmp.Or(strings.Compare(a.Topic, b.Topic),
		strings.Compare(string(a.AggregateType), string(b.AggregateType)),
		compareBool(aKeyless, bKeyless), strings.Compare(aKey, bKey))
}

// AggregateKey is how ordered claims name the aggregate of the event
// with the given aggregate id and id within its topic and aggregate type:
// by its aggregate id, or, when it has none (keyless), by its own id.
func AggregateKey(aggregateID, id string) (keyless bool, key string) {
	if aggregateID == "" {
		return true, id
	}
	return false, aggregateID
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// Reset makes the next claim start from the earliest due event.
func (c *ClaimCursor) Reset() { *c = ClaimCursor{} }

// IsZero reports whether the cursor is at the start; a nil cursor is.
func (c *ClaimCursor) IsZero() bool { return c == nil || c.ID == "" }

// Normalize validates r and fills in defaults.
func (r ClaimRequest) Normalize() (ClaimRequest, error) {
	if r.Owner == "" {
		return r, invalidRequest("claim owner is required")
	}
	if reason := checkText(r.Owner, MaxOwnerLen); reason != "" {
		return r, invalidRequest("claim owner: %s", reason)
	}
	if r.LockTimeout < 0 {
		return r, invalidRequest("negative lock timeout %s", r.LockTimeout)
	}
	if r.LockTimeout == 0 {
		r.LockTimeout = DefaultLockTimeout
	}
	poll, err := PollRequest{Limit: r.Limit, SkipRecent: r.SkipRecent, Topics: r.Topics}.Normalize()
	r.Limit = poll.Limit
	if err != nil {
		return r, err
	}
	r.Aggregates, err = r.normalizeAggregates()
	return r, err
}

// normalizeAggregates validates the Aggregates of a normalized request,
// and gives those without a type [GlobalAggregate], as [Prepare] gives
// their events.
func (r ClaimRequest) normalizeAggregates() ([]Aggregate, error) {
	switch {
	case len(r.Aggregates) == 0:
		return nil, nil
	case !r.Ordered:
		return nil, invalidRequest("aggregates narrow ordered claims only")
	case len(r.Aggregates) > r.Limit:
		return nil, invalidRequest("%d aggregates for a claim of at most %d events", len(r.Aggregates), r.Limit)
	}
	aggregates, cloned := r.Aggregates, false
	for i, a := range aggregates {
		switch {
		case a.ID == "":
			return nil, invalidRequest("aggregate of topic %q and type %q: no aggregate id (events without one are not ordered)", a.Topic, a.Type)
		case a.Topic == "":
			return nil, invalidRequest("aggregate %s: no topic", a.ID)
		case len(r.Topics) > 0 && !slices.Contains(r.Topics, a.Topic):
			return nil, invalidRequest("aggregate %s of topic %q, not one of the claim's topics", a.ID, a.Topic)
		case a.Type == "":
			if !cloned { // the caller's slice stays as it is
				aggregates, cloned = slices.Clone(aggregates), true
			}
			aggregates[i].Type = GlobalAggregate
		}
	}
	return aggregates, nil
}

// PollRequest selects the events [Store.PollPending] returns.
type PollRequest struct {
	// Limit caps the number of events. Default [DefaultClaimLimit].
	Limit int
	// SkipRecent leaves out events written less than this long ago.
	SkipRecent time.Duration
	// Topics restricts the poll to these topics; empty means all topics.
	Topics []string
}

// Normalize validates r and fills in defaults.
func (r PollRequest) Normalize() (PollRequest, error) {
	limit, err := normalizeLimit(r.Limit, DefaultClaimLimit, maxRequestLimit)
	if err != nil {
		return r, err
	}
	r.Limit = limit
	if r.SkipRecent < 0 {
		return r, invalidRequest("negative skip-recent %s", r.SkipRecent)
	}
	return r, nil
}

func normalizeLimit(limit, def, max int) (int, error) {
	switch {
	case limit < 0:
		return 0, invalidRequest("negative limit %d", limit)
	case limit == 0:
		return def, nil
	case limit > max:
		return 0, invalidRequest("limit %d exceeds %d", limit, max)
	}
	return limit, nil
}

// StatusUpdate is one delivery outcome for [Store.UpdateStatus]. Build it
// with [Done], [Retry], [Dead] or [Defer].
type StatusUpdate struct {
	ID string
	// Status is the new status: DONE, RETRY or DEAD; NEW here means "keep
	// the current status" and is how [Defer] is expressed.
	Status Status
	// NextAt is when a RETRY or deferred event is due again; a DONE
	// outcome ignores it.
	NextAt time.Time
	// Error is stored in last_error (cut by [CutError]); "" keeps the
	// previous last_error, and so does a DONE outcome.
	Error string
	// Attempt is the number of the delivery attempt a RETRY or DEAD
	// reports: 1 for the first, the event's Attempts when delivered plus
	// one, as [Decide] sets it. Set, the outcome applies only while the
	// event has Attempt-1 failed attempts recorded, so that an outcome
	// written twice (a statement sent again after its reply was lost) counts
	// once and leaves a newer claim alone. 0 leaves it unchecked.
	Attempt int
}

// Done records a successful delivery.
func Done(id string) StatusUpdate { return StatusUpdate{ID: id, Status: StatusDone} }

// Retry records a failed attempt (attempts+1) and schedules the next at
// nextAt.
func Retry(id string, nextAt time.Time, err error) StatusUpdate {
	return StatusUpdate{ID: id, Status: StatusRetry, NextAt: nextAt, Error: errorText(err)}
}

// Dead records a final failure (attempts+1): the event is not retried.
func Dead(id string, err error) StatusUpdate {
	return StatusUpdate{ID: id, Status: StatusDead, Error: errorText(err)}
}

// Defer makes the event due again at nextAt without spending an attempt
// and without changing its status: the handler asked to be called later.
func Defer(id string, nextAt time.Time, reason error) StatusUpdate {
	return StatusUpdate{ID: id, Status: StatusNew, NextAt: nextAt, Error: errorText(reason)}
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Validate reports an update that cannot be applied.
func (u StatusUpdate) Validate() error {
	switch {
	case u.ID == "":
		return invalidRequest("status update without an event id")
	case u.Status == StatusRetry && u.NextAt.IsZero():
		return invalidRequest("retry of %s without a next time", u.ID)
	case u.Status == StatusNew && u.NextAt.IsZero():
		return invalidRequest("deferral of %s without a next time", u.ID)
	case u.Status < StatusNew || u.Status > StatusDead:
		return invalidRequest("unknown status %d for %s", u.Status, u.ID)
	case u.Attempt < 0:
		return invalidRequest("attempt %d of %s", u.Attempt, u.ID)
	}
	return nil
}

// AttemptSpent reports whether the update counts as a failed attempt.
func (u StatusUpdate) AttemptSpent() bool {
	return u.Status == StatusRetry || u.Status == StatusDead
}

// AttemptsBefore returns the failed attempts the event must have recorded
// for the update to apply, and false when the update does not check them
// (see [StatusUpdate.Attempt]).
func (u StatusUpdate) AttemptsBefore() (int, bool) {
	if u.Attempt == 0 || !u.AttemptSpent() {
		return 0, false
	}
	return u.Attempt - 1, true
}

// DeadFilter selects DEAD events: those that match every field set. Zero
// fields match everything, and a zero filter every DEAD event, which
// [Store.ReplayDead] refuses.
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
	// DiedBefore keeps only events that went DEAD before this time.
	DiedBefore time.Time
}

// ValidateReplay reports a filter that [Store.ReplayDead] refuses: one
// that restricts nothing (IDs nil, every other field zero), which would
// replay every DEAD event, as a forgotten or lost filter would. A non-nil
// empty IDs restricts, to no event.
func (f DeadFilter) ValidateReplay() error {
	if f.IDs == nil && f.EventType == "" && f.Topic == "" && f.DiedBefore.IsZero() {
		return invalidRequest("replay of dead events with a filter that restricts nothing; " +
			"to replay every DEAD event, set DiedBefore: time.Now()")
	}
	return nil
}

// DeadQuery pages through DEAD events.
type DeadQuery struct {
	DeadFilter
	// After is the id of the last event of the previous page; "" starts
	// from the beginning.
	After string
	// Limit is the page size. Default [DefaultDeadLimit], at most 10000.
	Limit int
}

// ValidateReleaseOwned checks the arguments of [Store.ReleaseOwned].
func ValidateReleaseOwned(owner, topic string) error {
	if owner == "" || topic == "" {
		return invalidRequest("release owned claims needs an owner and a topic")
	}
	return nil
}

// PurgeRequest says which terminal rows [Store.Purge] deletes.
type PurgeRequest struct {
	// OlderThan is the retention: rows whose status last changed longer ago
	// than this are deleted. Required, positive.
	OlderThan time.Duration
	// BatchSize is the number of rows deleted per transaction. Default
	// [DefaultPurgeBatch].
	BatchSize int
	// Statuses are the terminal statuses to purge. Default DONE and DEAD.
	Statuses []Status
}

// ValidateRetention reports a retention that [Store.Purge] and
// [Inbox.PurgeProcessed] refuse, as an [ErrInvalidRequest].
func ValidateRetention(olderThan time.Duration) error {
	if olderThan <= 0 {
		return invalidRequest("purge retention must be positive, got %s", olderThan)
	}
	return nil
}

// Normalize validates r and fills in defaults.
func (r PurgeRequest) Normalize() (PurgeRequest, error) {
	if err := ValidateRetention(r.OlderThan); err != nil {
		return r, err
	}
	batch, err := normalizeLimit(r.BatchSize, DefaultPurgeBatch, maxPurgeBatchLength)
	if err != nil {
		return r, err
	}
	r.BatchSize = batch
	if len(r.Statuses) == 0 {
		r.Statuses = []Status{StatusDone, StatusDead}
	}
	for _, s := range r.Statuses {
		if !s.Terminal() {
			return r, invalidRequest("purge of %s rows: only DONE and DEAD can be purged", s)
		}
	}
	return r, nil
}

// Normalize validates q and fills in defaults.
func (q DeadQuery) Normalize() (DeadQuery, error) {
	limit, err := normalizeLimit(q.Limit, DefaultDeadLimit, maxRequestLimit)
	q.Limit = limit
	return q, err
}

// PrepareUpdates validates updates and keeps one update of each event id,
// in order: the batch a dialect's UpdateStatus writes. That is the last,
// unless the event has a DONE among them: DONE is final in one batch as in
// the table, where no later outcome changes a DONE row (an event delivered
// twice, once acked and once nacked, was delivered).
func PrepareUpdates(updates []StatusUpdate) ([]StatusUpdate, error) {
	kept := make(map[string]int, len(updates))
	for i, u := range updates {
		if err := u.Validate(); err != nil {
			return nil, err
		}
		if k, seen := kept[u.ID]; !seen || updates[k].Status != StatusDone {
			kept[u.ID] = i
		}
	}
	if len(kept) == len(updates) {
		return updates, nil
	}
	out := make([]StatusUpdate, 0, len(kept))
	for i, u := range updates {
		if kept[u.ID] == i {
			out = append(out, u)
		}
	}
	return out, nil
}

// RecordOutcomes is how a dialect's UpdateStatus applies a batch: it
// checks the owner, prepares the batch ([PrepareUpdates]), passes the ids
// of its DONE outcomes to recordDone, a statement that marks those rows
// DONE (or deletes them, in a store configured to delete delivered
// events), and the other outcomes to update. DONE outcomes, the bulk of
// every batch, go as ids alone, which costs the driver and the database
// less than every field of an outcome. Neither is called with an empty
// batch. It returns the rows they changed; on an error, those
// changed before it.
func RecordOutcomes(owner string, updates []StatusUpdate, recordDone func(ids []string) (int64, error), update func([]StatusUpdate) (int64, error)) (int64, error) {
	if reason := checkText(owner, MaxOwnerLen); reason != "" {
		return 0, invalidRequest("outcome owner: %s", reason)
	}
	updates, err := PrepareUpdates(updates)
	if err != nil {
		return 0, err
	}
	done, rest := splitDone(updates)
	var recorded int64
	if len(done) > 0 {
		if recorded, err = recordDone(done); err != nil {
			return 0, err
		}
	}
	if len(rest) == 0 {
		return recorded, nil
	}
	updated, err := update(rest)
	return recorded + updated, err
}

// splitDone separates the ids of the DONE outcomes from the others.
func splitDone(updates []StatusUpdate) (done []string, rest []StatusUpdate) {
	done = make([]string, 0, len(updates))
	for _, u := range updates {
		if u.Status == StatusDone {
			done = append(done, u.ID)
		} else {
			rest = append(rest, u)
		}
	}
	return done, rest
}

// PurgeInBatches runs deleteBatch, which deletes at most batchSize rows in
// a transaction of its own, until a batch comes back short, and returns the
// total: how a dialect's Purge keeps each transaction bounded. On an error
// it returns the rows deleted before it.
func PurgeInBatches(batchSize int, deleteBatch func(deletedSoFar int64) (int64, error)) (int64, error) {
	var total int64
	for {
		n, err := deleteBatch(total)
		if err != nil {
			return total, err
		}
		total += n
		if n < int64(batchSize) {
			return total, nil
		}
	}
}
