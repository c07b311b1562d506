package outboxdriver

import (
	"context"
	"time"
)

// Driver is a store dialect for transactions of type Tx (pgx.Tx for
// PostgreSQL, *sql.Tx for the database/sql dialects): the statements of
// [Executor], and those that run in a business transaction.
type Driver[Tx any] interface {
	Executor

	// Begin starts a transaction on the driver's database, for the
	// engine's InTx. When the database is itself a transaction, Begin
	// opens a savepoint in it and Outer returns that transaction.
	Begin(ctx context.Context) (Tx, error)
	// Commit commits tx, or releases the savepoint it is.
	Commit(ctx context.Context, tx Tx) error
	// Rollback rolls tx back.
	Rollback(ctx context.Context, tx Tx) error
	// Outer returns the transaction Begin opens savepoints in, nil when
	// Begin starts transactions of its own. The engine runs the
	// after-commit hooks of a savepoint once that transaction commits.
	Outer() any

	// Insert writes p.Rows in tx, all of them or, when it fails, none, in
	// as few statements as it can, and does not commit. A row with
	// Claimed set is written claimed: locked_by p.Owner, locked_at p.Now,
	// locked_until p.LockedUntil. Every row gets status NEW, attempts 0,
	// and created_at and updated_at p.Now.
	//
	// A row with an IdempotencyKey whose topic and key another row holds
	// (committed, or written earlier in tx) is not written: Insert skips
	// it, reports it in the result's Skipped with the event id of the row
	// holding the key, and writes the others. A row holding the key that
	// another transaction wrote and has not committed yet is waited for,
	// as a unique index waits: once it commits the row is skipped, and if
	// it rolls back the row is written. Skipping a row never aborts tx;
	// an event id already in the table still fails the write, with an
	// error matching outbox.ErrDuplicateEvent. The engine gives Insert no
	// two rows with the same topic and key.
	//
	// With p.Mark set, the result's Savepoint is 0 when the rows went into
	// the top-level transaction, outside any savepoint; otherwise a
	// nonzero mark of the write for Kept: a savepoint holds the rows,
	// which can roll back while the transaction commits, or the driver
	// cannot tell. Without p.Mark it is 0.
	Insert(ctx context.Context, tx Tx, p *InsertParams) (InsertResult, error)

	// Kept returns those of ids, the rows of an Insert that returned the
	// mark savepoint, that tx still holds: the engine asks, in the
	// top-level transaction just before its commit, which of the rows
	// written in savepoints survived them. Order does not matter.
	Kept(ctx context.Context, tx Tx, savepoint uint64, ids []string) ([]string, error)

	// MarkProcessed records in tx, in the inbox table, that consumer
	// processed the event id at at, and reports whether that is new: false
	// when a committed transaction recorded it already. While another
	// transaction that recorded it is open, it waits for that one to end.
	MarkProcessed(ctx context.Context, tx Tx, consumer, id string, at time.Time) (bool, error)
}

// SchemaChecker is implemented by drivers that can tell whether their
// table is migrated; the engine's Store.Check calls it, and a relay
// before its first claim. A driver without it is assumed migrated.
type SchemaChecker interface {
	// CheckSchema returns an error matching outbox.ErrNotMigrated (an
	// *outbox.NotMigratedError naming the fix) when the table does not
	// exist, or when the migrations recorded applied to it stop before
	// the latest the driver knows. A table with no migration recorded
	// (migrated by another tool from the plain migration files) passes.
	// Other errors are the database's.
	CheckSchema(ctx context.Context) error
}

// Executor is what a driver runs outside business transactions: the
// relay's claims and outcomes, and operators' queries.
type Executor interface {
	// Get returns the row of event id, and false when there is none.
	Get(ctx context.Context, id string) (Row, bool, error)

	// Claim leases up to p.Limit due rows of p.Topic to p.Owner and
	// returns them, in any order: locked_by p.Owner, locked_at p.Now,
	// locked_until p.LockedUntil. It leaves available_at alone, so that a
	// row keeps its place in due order. Concurrent claims never return the
	// same row while its lease runs. See [ClaimParams] for which rows.
	Claim(ctx context.Context, p *ClaimParams) ([]Row, error)

	// Release ends p.Owner's leases on the pending rows of p.IDs, which
	// are then due at once, in their place, and returns how many it ended.
	Release(ctx context.Context, p ReleaseParams) (int64, error)

	// ReleaseOwned ends p.Owner's leases taken before p.ClaimedBefore on
	// the pending rows of p.Topic, and returns how many it ended: the
	// claims of an earlier run of a relay that restarted under the same
	// owner.
	ReleaseOwned(ctx context.Context, p ReleaseOwnedParams) (int64, error)

	// MarkDone records the delivery of the rows of p.IDs that are not
	// DONE, whoever holds them: status DONE, done_at and updated_at p.Now,
	// the lease cleared, attempts, available_at and last_error left alone.
	// A driver configured to delete delivered rows deletes them instead.
	// It returns how many rows changed.
	MarkDone(ctx context.Context, p MarkDoneParams) (int64, error)

	// RecordOutcomes applies failed deliveries and deferrals, each to a
	// pending row under the conditions of [Outcome], and returns how many
	// rows changed. Every row it changes gets updated_at p.Now and its
	// lease cleared.
	RecordOutcomes(ctx context.Context, p RecordOutcomesParams) (int64, error)

	// QueryDead returns up to p.Limit DEAD rows matching p.Filter with an
	// event id above p.After, ordered by event id.
	QueryDead(ctx context.Context, p QueryDeadParams) ([]Row, error)
	// CountDead counts the DEAD rows matching f.
	CountDead(ctx context.Context, f DeadFilter) (int64, error)
	// ReplayDead makes the DEAD rows matching p.Filter NEW again, due at
	// p.Now, with attempts 0, done_at and the lease cleared and updated_at
	// p.Now, keeping last_error; it returns how many.
	ReplayDead(ctx context.Context, p ReplayDeadParams) (int64, error)

	// Backlog counts the pending (NEW or RETRY) rows of topic, leased or
	// not, and returns the earliest available_at among them, the zero
	// time when there is none.
	Backlog(ctx context.Context, topic string) (pending int64, oldest time.Time, err error)

	// PurgeBatch deletes, in a transaction of its own, up to p.Limit rows
	// whose status is one of p.Statuses (DONE or DEAD) and whose
	// updated_at is before p.Before, and returns how many. It may pass
	// over rows other transactions hold locked.
	PurgeBatch(ctx context.Context, p PurgeParams) (int64, error)

	// PurgeProcessedBatch deletes, in a transaction of its own, up to
	// p.Limit inbox records made before p.Before, and returns how many.
	PurgeProcessedBatch(ctx context.Context, p PurgeParams) (int64, error)

	// Stats counts the rows by topic and status, with the earliest
	// available_at of the pending rows due at p.Now, and the leases
	// running at p.Now by owner and topic, and reads the relay
	// heartbeats. See [StatsResult]. With p.PendingOnly it counts the
	// pending rows alone, reading only them where an index allows, and no
	// leases or heartbeats.
	Stats(ctx context.Context, p StatsParams) (StatsResult, error)
	// DeadGroups groups the DEAD rows matching p.Filter by error_group (""
	// for NULL), up to p.Limit groups, the largest first, then by group.
	DeadGroups(ctx context.Context, p DeadGroupsParams) ([]DeadGroup, error)
	// QueryPending returns up to p.Limit rows whose status is one of
	// p.Statuses (NEW, RETRY), of p.Topic unless it is "", with an event
	// id above p.After, ordered by event id.
	QueryPending(ctx context.Context, p QueryPendingParams) ([]Row, error)
	// QueryEvents returns up to p.Limit rows of every status with an
	// event id above p.After, ordered by event id.
	QueryEvents(ctx context.Context, p QueryEventsParams) ([]Row, error)
	// QueryAggregate returns up to p.Limit rows of every status of the
	// aggregate p.Type, p.ID, of p.Topic unless it is "", newest first:
	// by created_at, then event_id, both descending; with p.Before set,
	// only the rows after it in that order. It reads the aggregate index
	// (<table>_agg_time_idx) backwards.
	QueryAggregate(ctx context.Context, p QueryAggregateParams) ([]Row, error)
	// PurgeDeadBatch deletes, in a transaction of its own, up to p.Limit
	// DEAD rows matching p.Filter, and returns how many. It may pass over
	// rows other transactions hold locked.
	PurgeDeadBatch(ctx context.Context, p PurgeDeadParams) (int64, error)
	// AcquireLease takes or renews the lease p.Name for p.Owner until
	// p.Until, and reports whether p.Owner holds it: it does when nobody
	// held it, when p.Owner did, or when the holder's lease ended before
	// p.Now. Concurrent calls never both get a lease another holds.
	AcquireLease(ctx context.Context, p LeaseParams) (bool, error)

	// Heartbeat records that relay p.Owner is alive until p.Until: it
	// writes the lease named [HeartbeatName](p.Owner), owner p.Owner,
	// inserting it or moving its until, and reports whether the row
	// existed. false tells a relay that it is new, or that it was presumed
	// dead and its claims released (see ReleaseDeadRelays).
	Heartbeat(ctx context.Context, p HeartbeatParams) (existed bool, err error)

	// ReleaseDeadRelays hands back the claims of relays presumed dead: for
	// each of up to p.Limit heartbeats (leases named with
	// [HeartbeatPrefix]) whose until is before p.Now, in a transaction of
	// its own, it deletes the heartbeat if it is still expired and, only
	// then, ends its owner's leases on the pending rows (NEW, RETRY), as
	// Release does: the rows are due at once, in their place. Concurrent
	// callers release each relay once: the one whose delete won. It
	// returns the relays it released, with how many rows and which
	// topics. Named leases of other kinds are never touched.
	ReleaseDeadRelays(ctx context.Context, p ReleaseDeadRelaysParams) ([]ReleasedRelay, error)

	// EndHeartbeat deletes relay owner's heartbeat, if it is still owner's:
	// a relay that closed cleanly and holds no claim any more.
	EndHeartbeat(ctx context.Context, owner string) error
}

// HeartbeatPrefix starts the names of relay heartbeats in the lease
// table, which the names of other leases (such as the retention job's)
// never do.
const HeartbeatPrefix = "relay:"

// HeartbeatName is the name of relay owner's heartbeat in the lease
// table.
func HeartbeatName(owner string) string { return HeartbeatPrefix + owner }

// HeartbeatPattern is a LIKE pattern of every heartbeat's name: the
// prefix has no wildcard character.
const HeartbeatPattern = HeartbeatPrefix + "%"

// HeartbeatParams are a renewal of relay Owner's heartbeat: it is alive
// until Until.
type HeartbeatParams struct {
	Owner string
	Until time.Time
}

// ReleaseDeadRelaysParams select the heartbeats [Executor.ReleaseDeadRelays]
// ends: up to Limit (at least 1) whose until is before Now.
type ReleaseDeadRelaysParams struct {
	Now   time.Time
	Limit int
}

// ReleasedRelay is a relay presumed dead whose claims were handed back:
// Events pending rows, of Topics (distinct, in any order).
type ReleasedRelay struct {
	Owner  string
	Events int64
	Topics []string
}

// InsertParams is a write of events in a business transaction.
type InsertParams struct {
	// Rows are the events, valid and complete: the engine validated them
	// and filled in every default.
	Rows []InsertRow
	// Now is the time of the write: created_at, updated_at, and locked_at
	// of the claimed rows.
	Now time.Time
	// Owner and LockedUntil are the lease of the rows written claimed;
	// Owner is "" when no row is.
	Owner       string
	LockedUntil time.Time
	// Mark asks for the savepoint mark (see [Driver.Insert]): the write
	// has hot rows, which go to the hot path after the commit only if no
	// savepoint rolled them back.
	Mark bool
	// RejectDuplicateKeys makes a write that skips a row write none:
	// Insert then removes again the rows it wrote, reports in Skipped
	// every row whose key was taken, and returns no error, leaving tx
	// usable.
	RejectDuplicateKeys bool
}

// InsertResult is what [Driver.Insert] did.
type InsertResult struct {
	// Savepoint is the mark of the write, see [Driver.Insert].
	Savepoint uint64
	// Skipped are the rows not written because their topic and
	// idempotency key were taken, in the order of the rows.
	Skipped []SkippedRow
}

// SkippedRow is a row of an insert not written because its topic and
// idempotency key were taken.
type SkippedRow struct {
	// Index is the row's place in InsertParams.Rows.
	Index int
	// ExistingID is the event id of the row that holds the key.
	ExistingID string
}

// InsertRow is one event's row as the engine prepared it.
type InsertRow struct {
	ID, Type, Topic, AggregateType string
	// AggregateID and TenantID are "" for none (NULL).
	AggregateID, TenantID string
	// Payload is never nil; PayloadJSON says whether it is a JSON
	// document.
	Payload     []byte
	PayloadJSON bool
	// Headers is a JSON object of strings, "" for none (NULL).
	Headers string
	// OccurredAt and AvailableAt are the event's time and when it is due.
	OccurredAt, AvailableAt time.Time
	// Claimed rows are written leased (see [InsertParams]).
	Claimed bool
	// IdempotencyKey is "" for none (NULL); a row with one is written only
	// if no row of its topic has the same key (see [Driver.Insert]).
	IdempotencyKey string
}

// Row is a stored event as a driver reads it.
type Row struct {
	ID, Type, Topic, AggregateType string
	// AggregateID, TenantID, LastError and LockedBy are "" for NULL.
	AggregateID, TenantID string
	// Payload is the row's own copy, empty rather than nil.
	Payload     []byte
	PayloadJSON bool
	// Headers is the stored JSON object, "" for NULL; the engine decodes
	// it.
	Headers  string
	Status   int16
	Attempts int
	OccurredAt, AvailableAt, CreatedAt, UpdatedAt,
	DoneAt time.Time // zero for NULL, as are the lock times
	LastError, LockedBy   string
	LockedAt, LockedUntil time.Time
	// ErrorGroup is the stored error_group, "" for NULL.
	ErrorGroup string
	// IdempotencyKey is the stored idempotency_key, "" for NULL.
	IdempotencyKey string
	// Seq is the row's place in the order of the inserts, which orders an
	// aggregate's events for ordered claims, on a driver whose rows carry
	// one (PostgreSQL, and the rows its [Feed] streams); 0 elsewhere.
	Seq int64
	// RunIndex is the row's place in the run of its aggregate that an
	// ordered claim with RunLength above 1 took (see
	// [ClaimParams.RunLength]): 0 for the aggregate's first row (its head),
	// 1 for the row after it, and so on. 0 for every other row.
	RunIndex int
	// Malformed says why a row cannot be read as an event (a timestamp
	// that is not a time, say), nil when it can. A claim returns such a
	// row rather than fail: the relay records it DEAD with this error.
	Malformed error
}

// ClaimParams selects the rows a claim leases: due rows of Topic (NEW ones
// due at their write only if created no later than CreatedBefore), in due
// order (available_at, then event_id).
type ClaimParams struct {
	Owner string
	Topic string
	// Now is when the claim runs: the rows due by then, their locked_at.
	Now time.Time
	// CreatedBefore leaves NEW rows created after it and due at once
	// (available_at no later than created_at) to the hot path, or to a
	// relay's [Feed]. Rows scheduled for later and RETRY rows are due by
	// their available_at alone: neither takes them.
	CreatedBefore time.Time
	// LockedUntil is the end of the lease the claim takes.
	LockedUntil time.Time
	// Limit is at least 1.
	Limit int

	// After, when not nil, lets the claim start past the rows the
	// previous claim took (see [Position]). A driver may ignore it.
	After *Position

	// Ordered leases the rows of an aggregate one at a time, in the order
	// they were inserted: a row is left out while an earlier row of its
	// topic and aggregate (aggregate_type and aggregate_id) is not DONE,
	// whatever its status, lease or due time. Rows without an aggregate_id
	// are not ordered. Which of the claimable rows an ordered claim takes
	// is the driver's choice (PostgreSQL walks the aggregates from After;
	// the others take the earliest due).
	Ordered bool
	// Aggregates, with Ordered, narrows the claim to the first rows of
	// these aggregates, each of Topic with an ID and a Type: a relay that
	// knows where a row may have become due names it, and the driver looks
	// each up rather than walk the topic. After is nil then. A driver may
	// claim as it would without it, never a row that waits for an earlier
	// one.
	Aggregates []Aggregate
	// AggregateBounds, with Aggregates (nil, or one for each), is the
	// highest [Row.Seq] the claim may take of each aggregate: a relay in
	// log mode names the rows a [Feed] has left to claims, and leaves the
	// rows it has not streamed yet to the feed. A driver may ignore it,
	// as it may Aggregates: a claim that takes more only races the feed.
	AggregateBounds []int64
	// RunLength, with Ordered, above 1, leases with the first row of each
	// aggregate the claim takes (its head) up to RunLength-1 of the rows
	// after it, in insert order, each with its RunIndex: a run of the
	// aggregate, which no other claim can take while the head is leased.
	// The run stops before the first row that is not due now (claimed,
	// scheduled for later, waiting for a retry, DEAD, written after
	// CreatedBefore) and before the first the claim cannot lock, so that a
	// run is always the head and the rows right after it. Rows without an
	// aggregate id have no run. Limit bounds the heads and RunRows the
	// rows in all: every run's k-th row is taken before any run's
	// (k+1)-th. A driver may take shorter runs, down to the heads alone.
	RunLength int
	// RunRows bounds the rows of a claim with runs, heads included; at
	// least Limit.
	RunRows int
}

// Position is where the previous claim of a cursor ended: its last row in
// due order (DueAt, ID), or, for ordered claims, the last aggregate in
// aggregate order (Topic, AggregateType, then rows without an
// aggregate_id after those with one, then Key), byte by byte.
type Position struct {
	DueAt time.Time
	ID    string
	// Topic, AggregateType, Keyless and Key name the aggregate: Key is
	// the aggregate_id, or the event_id of a row without one (Keyless).
	Topic, AggregateType string
	Keyless              bool
	Key                  string
}

// Aggregate names the events of one entity within a topic.
type Aggregate struct {
	Topic, Type, ID string
}

// ReleaseParams names the leases [Executor.Release] ends.
type ReleaseParams struct {
	Owner string
	IDs   []string
}

// ReleaseOwnedParams names the leases [Executor.ReleaseOwned] ends.
type ReleaseOwnedParams struct {
	Owner, Topic  string
	ClaimedBefore time.Time
}

// MarkDoneParams are the rows [Executor.MarkDone] records delivered.
type MarkDoneParams struct {
	Now time.Time
	IDs []string
}

// RecordOutcomesParams are a batch of outcomes reported by Owner, the
// relay that claimed the rows ("" for a caller that holds no lease).
type RecordOutcomesParams struct {
	Now      time.Time
	Owner    string
	Outcomes []Outcome // one per event id
}

// Outcome is a failed delivery (status RETRY or DEAD, an attempt spent) or
// a deferral (status 0: the status stays, no attempt is spent). It
// applies only to a NEW or RETRY row that the batch's owner still leases
// (its lease running, or run out while nobody claimed the row since) or,
// from owner "", that no lease runs on; and, with AttemptsChecked, only
// while the row has AttemptsBefore failed attempts. Anything else is a
// stale outcome and changes nothing.
type Outcome struct {
	ID     string
	Status int16
	// AttemptSpent adds one to attempts.
	AttemptSpent bool
	// NextAt, when not zero, becomes available_at.
	NextAt time.Time
	// Error, when not "", becomes last_error; the engine cut it to fit.
	// ErrorGroup, set with it, becomes error_group.
	Error, ErrorGroup string
	AttemptsChecked   bool
	AttemptsBefore    int
}

// DeadFilter selects DEAD rows: those that match every field set.
type DeadFilter struct {
	// IDs, when not nil, restricts to these event ids; empty matches none.
	IDs []string
	// EventType, Topic, AggregateType and AggregateID, when not "",
	// restrict to rows with that value.
	EventType, Topic, AggregateType, AggregateID string
	// ErrorContains, when not "", keeps rows whose last_error contains it,
	// ignoring case; its characters match themselves (a driver using LIKE
	// escapes % and _).
	ErrorContains string
	// Group, when not "", keeps rows whose error_group is Group; Ungrouped
	// keeps rows whose error_group is NULL.
	Group     string
	Ungrouped bool
	// DiedAfter, when not zero, keeps rows whose updated_at is at or after
	// it; DiedBefore, when not zero, rows whose updated_at is before it.
	DiedAfter, DiedBefore time.Time
}

// QueryDeadParams pages through DEAD rows.
type QueryDeadParams struct {
	Filter DeadFilter
	After  string
	Limit  int
}

// ReplayDeadParams are the DEAD rows [Executor.ReplayDead] makes NEW.
type ReplayDeadParams struct {
	Filter DeadFilter
	Now    time.Time
}

// PurgeParams are the rows a purge batch deletes. Statuses is nil for the
// inbox.
type PurgeParams struct {
	Statuses []int16
	Before   time.Time
	Limit    int
}

// PurgeDeadParams are the DEAD rows a purge batch deletes.
type PurgeDeadParams struct {
	Filter DeadFilter
	Limit  int
}

// StatsParams ask for the table's counts at Now.
type StatsParams struct {
	Now time.Time
	// PendingOnly asks for the NEW and RETRY rows alone, without leases:
	// the relay's periodic read of which topics have events.
	PendingOnly bool
}

// StatsResult is what [Executor.Stats] read. Its slices may be in any
// order, and a (topic, status) or (owner, topic) pair may come in several
// parts: the engine sorts and adds them up.
type StatsResult struct {
	Topics []TopicStatus
	Claims []OwnerClaims
	// Relays are the relay heartbeats of the lease table (see
	// [HeartbeatPrefix]), expired or not; none with PendingOnly.
	Relays []RelayHeartbeat
	// Slots are the database's log slots, for a driver that has them
	// (see [LogSlotReader]); none with PendingOnly.
	Slots []LogSlot
}

// LogSlotReader is implemented by the executor of a store whose database
// keeps logs of changes that a [Feed] reads (PostgreSQL's logical
// replication slots).
type LogSlotReader interface {
	// LogSlots reads the logical replication slots of the store's
	// database.
	LogSlots(ctx context.Context) ([]LogSlot, error)
}

// FeedOrderer is implemented by the executor of a store whose table a
// [Feed] streams, for ordered relays in log mode. An aggregate whose
// earlier event is unfinished in the table (failed, scheduled, or left to
// claims) must not have its later events delivered from the stream ahead
// of it; once the claims have delivered every earlier event, its events
// may come from the stream again.
type FeedOrderer interface {
	// UnfinishedBefore reports, for each row of p.Rows, whether the table
	// holds an event of the row's aggregate, within p.Topic, that is not
	// DONE and was inserted before the row (a lower [Row.Seq]). The
	// rows have an aggregate id.
	UnfinishedBefore(ctx context.Context, p UnfinishedBeforeParams) ([]bool, error)
	// LeaseFirst leases to p.Owner, until p.LockedUntil, each event of
	// p.IDs (of p.Topic, with an aggregate id) that is NEW, under no
	// running lease, and the first event of its aggregate not DONE, and
	// returns the rows it leased: a claim of the aggregate then passes
	// it over.
	LeaseFirst(ctx context.Context, p LeaseFirstParams) ([]Row, error)
}

// UnfinishedBeforeParams are the rows [FeedOrderer.UnfinishedBefore]
// asks about: streamed rows of Topic.
type UnfinishedBeforeParams struct {
	Topic string
	Rows  []Row
}

// LeaseFirstParams are the events [FeedOrderer.LeaseFirst] leases, at
// Now.
type LeaseFirstParams struct {
	Owner, Topic     string
	IDs              []string
	Now, LockedUntil time.Time
}

// SlotLeasePrefix starts the name of the lease-table row in which a
// [Feed] reading slot S records its progress ("slot:S"): owner the
// reader, until when it last confirmed a position. Heartbeats and other
// named leases never start with it.
const SlotLeasePrefix = "slot:"

// LogSlot is a replication slot as [LogSlotReader.LogSlots] reads it.
type LogSlot struct {
	Name string
	// Active says a reader is connected to it now.
	Active bool
	// LagBytes is the log the slot holds back: from its confirmed
	// position to the database's current one.
	LagBytes int64
	// WALStatus is the database's word for whether the log the slot needs
	// is still there ("reserved", "extended", "unreserved", "lost").
	WALStatus string
	// Reader and ConfirmedAt come from the slot's lease-table row (see
	// [SlotLeasePrefix]): the feed that last confirmed a position, and
	// when. "" and zero when no feed of this module read it.
	Reader      string
	ConfirmedAt time.Time
}

// RelayHeartbeat is a relay's heartbeat as the lease table holds it: the
// relay Owner counts as alive until Until.
type RelayHeartbeat struct {
	Owner string
	Until time.Time
}

// TopicStatus counts a topic's rows of one status. OldestDue is the
// earliest available_at of those rows that are pending and due at the
// query's Now (leased or not), zero for other statuses or when none is
// due.
type TopicStatus struct {
	Topic     string
	Status    int16
	Count     int64
	OldestDue time.Time
}

// OwnerClaims are the pending rows of Topic whose lease by Owner runs at
// the query's Now: how many, the earliest locked_at and the latest
// locked_until.
type OwnerClaims struct {
	Owner, Topic           string
	Events                 int64
	OldestClaim, LeaseEnds time.Time
}

// DeadGroupsParams select the DEAD rows [Executor.DeadGroups] groups.
type DeadGroupsParams struct {
	Filter DeadFilter
	Limit  int
}

// DeadGroup is the DEAD rows of one error_group ("" for NULL): how many,
// the earliest and latest updated_at, the last_error of one of them, and
// their distinct topics, sorted.
type DeadGroup struct {
	Group               string
	Count               int64
	FirstDied, LastDied time.Time
	SampleError         string
	Topics              []string
}

// QueryPendingParams page through pending rows.
type QueryPendingParams struct {
	Topic    string
	Statuses []int16
	After    string
	Limit    int
}

// QueryEventsParams page through every row, whatever its status.
type QueryEventsParams struct {
	After string
	Limit int
}

// QueryAggregateParams page through one aggregate's rows, newest first.
type QueryAggregateParams struct {
	// Type and ID name the aggregate; ID is never "".
	Type, ID string
	// Topic, when not "", restricts to the rows of that topic.
	Topic string
	// Before, when not nil, is the last row of the previous page: the
	// page holds the rows older than it, by (created_at, event_id).
	Before *AggregateCursor
	// Limit is at least 1.
	Limit int
}

// AggregateCursor is a row's place in an aggregate's newest-first order.
type AggregateCursor struct {
	CreatedAt time.Time
	ID        string
}

// LeaseParams are a take or renewal of a named lease: one instance at a
// time across processes runs what it guards (a retention job).
type LeaseParams struct {
	Name, Owner string
	Now, Until  time.Time
}
