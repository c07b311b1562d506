package outbox

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// Stats is a snapshot of the table for operators, as [Store.Stats] reads
// it.
type Stats struct {
	// At is when the snapshot was read, on the store's clock.
	At time.Time
	// Topics are the event counts of every topic that has events, by
	// topic name.
	Topics []TopicStats
	// Claims are the leases running at At, by owner, then topic.
	Claims []ClaimStats
	// Relays are the relays' heartbeats, by owner: those of relays
	// running now, and of relays that died and whose claims no live
	// relay has handed back yet.
	Relays []RelayStats
	// Slots are the database's log slots, by name: what a relay in log
	// mode reads (PostgreSQL's logical replication slots of the store's
	// database). None on a database without them.
	Slots []SlotStats
}

// SlotStats is a log slot: how much log it keeps the database from
// recycling, and who last confirmed reading it. A slot nobody reads keeps
// the log for ever, and the disk fills.
type SlotStats struct {
	// Name is the slot's name.
	Name string
	// Active says a reader is connected to it now.
	Active bool
	// LagBytes is the log the slot holds back: from the position its
	// reader last confirmed to the database's current one.
	LagBytes int64
	// WALStatus is the database's word for whether the log the slot needs
	// is still there: "reserved", "extended", "unreserved", or "lost"
	// once max_slot_wal_keep_size made the database drop it.
	WALStatus string
	// Reader is the relay owner that last confirmed a position, and
	// ConfirmedAt when; "" and zero for a slot no relay of this table
	// read (another table's, or another tool's).
	Reader      string
	ConfirmedAt time.Time
	// ConfirmedAge is how long before [Stats.At] ConfirmedAt was; 0 when
	// ConfirmedAt is zero.
	ConfirmedAge time.Duration
}

// RelayStats is a relay's heartbeat.
type RelayStats struct {
	// Owner is the relay's owner name (SubscriberConfig.Owner).
	Owner string
	// Until is when its heartbeat expires: it renews it before then while
	// it runs.
	Until time.Time
	// Alive says whether Until is after [Stats.At]. A relay that is not
	// is taken for dead, and the first live relay to notice hands back
	// its claims.
	Alive bool
}

// TopicStats are the events of one topic by status.
type TopicStats struct {
	Topic                  string
	New, Retry, Done, Dead int64
	// OldestDue is the earliest due time among the topic's pending events
	// that are due at [Stats.At], zero when none is: Stats.At minus
	// OldestDue is how long the oldest undelivered event has waited.
	OldestDue time.Time
}

// Pending returns the topic's NEW and RETRY events.
func (t TopicStats) Pending() int64 { return t.New + t.Retry }

// ClaimStats are the leases one relay holds on one topic's events.
type ClaimStats struct {
	// Owner is the relay's owner name (SubscriberConfig.Owner).
	Owner, Topic string
	// Events is how many events the owner holds.
	Events int64
	// OldestClaim is when the oldest of the leases was taken, and
	// LeaseEnds when the last of them runs out.
	OldestClaim, LeaseEnds time.Time
}

// Stats reads the counts of every topic by status, how long each topic's
// oldest due event has waited, the claims in flight, the relays'
// heartbeats and the database's log slots. It reads the whole table: call
// it for an operator, not on a hot path.
func (s *Store[Tx]) Stats(ctx context.Context) (Stats, error) {
	now := s.clock.Now()
	res, err := s.driver.Stats(ctx, outboxdriver.StatsParams{Now: now})
	if err != nil {
		return Stats{}, err
	}
	// The driver's parts come in any order: sort them so that the parts
	// of one topic, or of one owner and topic, are next to each other.
	slices.SortFunc(res.Topics, func(a, b outboxdriver.TopicStatus) int { return strings.Compare(a.Topic, b.Topic) })
	slices.SortFunc(res.Claims, func(a, b outboxdriver.OwnerClaims) int {
		return cmp.Or(strings.Compare(a.Owner, b.Owner), strings.Compare(a.Topic, b.Topic))
	})
	stats := Stats{At: now, Topics: make([]TopicStats, 0, len(res.Topics)), Claims: make([]ClaimStats, 0, len(res.Claims))}
	for _, t := range res.Topics {
		if n := len(stats.Topics); n == 0 || stats.Topics[n-1].Topic != t.Topic {
			stats.Topics = append(stats.Topics, TopicStats{Topic: t.Topic})
		}
		ts := &stats.Topics[len(stats.Topics)-1]
		switch Status(t.Status) {
		case StatusNew:
			ts.New += t.Count
		case StatusRetry:
			ts.Retry += t.Count
		case StatusDone:
			ts.Done += t.Count
		case StatusDead:
			ts.Dead += t.Count
		}
		ts.OldestDue = earliest(ts.OldestDue, t.OldestDue)
	}
	for _, c := range res.Claims {
		n := len(stats.Claims)
		if n == 0 || stats.Claims[n-1].Owner != c.Owner || stats.Claims[n-1].Topic != c.Topic {
			stats.Claims = append(stats.Claims, ClaimStats(c))
			continue
		}
		cs := &stats.Claims[n-1]
		cs.Events += c.Events
		cs.OldestClaim = earliest(cs.OldestClaim, c.OldestClaim)
		if c.LeaseEnds.After(cs.LeaseEnds) {
			cs.LeaseEnds = c.LeaseEnds
		}
	}
	slices.SortFunc(res.Relays, func(a, b outboxdriver.RelayHeartbeat) int { return strings.Compare(a.Owner, b.Owner) })
	for _, r := range res.Relays {
		stats.Relays = append(stats.Relays, RelayStats{Owner: r.Owner, Until: r.Until, Alive: r.Until.After(now)})
	}
	slices.SortFunc(res.Slots, func(a, b outboxdriver.LogSlot) int { return strings.Compare(a.Name, b.Name) })
	for _, sl := range res.Slots {
		stats.Slots = append(stats.Slots, SlotStats{Name: sl.Name, Active: sl.Active, LagBytes: sl.LagBytes,
			WALStatus: sl.WALStatus, Reader: sl.Reader, ConfirmedAt: sl.ConfirmedAt, ConfirmedAge: sl.ConfirmedAge(now)})
	}
	return stats, nil
}

// earliest returns the earlier of a and b, ignoring either when it is
// zero.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// DeadGroup is the DEAD events that failed for one reason: their errors
// are the same once ids, numbers, addresses and quoted values are
// replaced by placeholders.
type DeadGroup struct {
	// Group names the group in a [DeadFilter]; [UngroupedDead] for events
	// that died before the table recorded groups.
	Group string
	// Reason is the error with ids, numbers, addresses and quoted values
	// replaced by placeholders; "" for UngroupedDead.
	Reason string
	// SampleError is the last error of one of the group's events.
	SampleError string
	// Count is the number of events in the group.
	Count int64
	// FirstDied and LastDied are when the group's first and last events
	// went DEAD.
	FirstDied, LastDied time.Time
	// Topics are the topics of the group's events, sorted.
	Topics []string
}

// DeadGroupQuery selects the DEAD events [Store.DeadGroups] groups.
type DeadGroupQuery struct {
	DeadFilter
	// Limit is how many groups to return, those with the most events
	// first. Default 100, at most 1000.
	Limit int
}

// Defaults of the operator queries' limits.
const (
	defaultGroupLimit = 100
	maxGroupLimit     = 1000
)

// DeadGroups groups the DEAD events matching q by failure reason, the
// largest groups first (then by group name).
func (s *Store[Tx]) DeadGroups(ctx context.Context, q DeadGroupQuery) ([]DeadGroup, error) {
	limit, err := normalizeLimit(q.Limit, defaultGroupLimit, maxGroupLimit)
	if err != nil {
		return nil, err
	}
	rows, err := s.driver.DeadGroups(ctx, outboxdriver.DeadGroupsParams{Filter: q.driver(), Limit: limit})
	if err != nil {
		return nil, err
	}
	groups := make([]DeadGroup, len(rows))
	for i, r := range rows {
		g := DeadGroup{Group: r.Group, SampleError: r.SampleError, Count: r.Count, FirstDied: r.FirstDied, LastDied: r.LastDied, Topics: r.Topics}
		if g.Group == "" {
			g.Group = UngroupedDead
		} else {
			g.Reason = errorReason(r.SampleError)
		}
		groups[i] = g
	}
	return groups, nil
}

// PendingQuery pages through pending (NEW and RETRY) events.
type PendingQuery struct {
	// Topic restricts the query to one topic; "" lists every topic.
	Topic string
	// Statuses restricts the query to NEW or RETRY events; nil lists
	// both.
	Statuses []Status
	// After is the id of the last event of the previous page; "" starts
	// from the beginning.
	After string
	// Limit is the page size. Default 100, at most 10000.
	Limit int
}

// QueryPending lists pending events matching q, ordered by event id.
func (s *Store[Tx]) QueryPending(ctx context.Context, q PendingQuery) ([]Event, error) {
	limit, err := normalizeLimit(q.Limit, defaultDeadLimit, maxDeadLimit)
	if err != nil {
		return nil, err
	}
	statuses := []int16{int16(StatusNew), int16(StatusRetry)}
	if q.Statuses != nil {
		statuses = make([]int16, len(q.Statuses))
		for i, st := range q.Statuses {
			if !st.Pending() {
				return nil, invalidRequest("pending query of %s events: only NEW and RETRY are pending", st)
			}
			statuses[i] = int16(st)
		}
	}
	rows, err := s.driver.QueryPending(ctx, outboxdriver.QueryPendingParams{Topic: q.Topic, Statuses: statuses, After: q.After, Limit: limit})
	if err != nil {
		return nil, err
	}
	return eventsOf(rows), nil
}

// EventQuery pages through every event of the table, whatever its
// status.
type EventQuery struct {
	// After is the id of the last event of the previous page; "" starts
	// from the beginning.
	After string
	// Limit is the page size. Default 100, at most 10000.
	Limit int
}

// QueryEvents lists the events of the table matching q, of every status
// (NEW, RETRY, DONE, DEAD), ordered by event id: what the table holds, for
// tests (outboxtest reads what was written through it) and tools. A store
// configured to delete delivered events has no DONE events to list.
func (s *Store[Tx]) QueryEvents(ctx context.Context, q EventQuery) ([]Event, error) {
	limit, err := normalizeLimit(q.Limit, defaultDeadLimit, maxDeadLimit)
	if err != nil {
		return nil, err
	}
	rows, err := s.driver.QueryEvents(ctx, outboxdriver.QueryEventsParams{After: q.After, Limit: limit})
	if err != nil {
		return nil, err
	}
	return eventsOf(rows), nil
}

// PurgeDead deletes the DEAD events matching f, in batches of 1000 rows
// each in its own transaction, and returns how many it deleted; on an
// error, those deleted before it. Like [Store.ReplayDead], it refuses a
// filter that restricts nothing; [Store.Purge] deletes DEAD events by
// age.
func (s *Store[Tx]) PurgeDead(ctx context.Context, f DeadFilter) (int64, error) {
	if !f.restricts() {
		return 0, invalidRequest("purge of dead events with a filter that restricts nothing; " +
			"to purge every DEAD event, set DiedBefore: time.Now()")
	}
	p := outboxdriver.PurgeDeadParams{Filter: f.driver(), Limit: defaultPurgeBatch}
	return purgeInBatches(ctx, "purge dead", p.Limit, nil, func(ctx context.Context) (int64, error) {
		return s.driver.PurgeDeadBatch(ctx, p)
	})
}

// AggregateQuery pages through the events of one aggregate, of every
// status, newest first.
type AggregateQuery struct {
	// Type is the aggregate's type; "" is [GlobalAggregate], as in an
	// [Envelope].
	Type AggregateType
	// ID is the aggregate's id. Required: events written without one
	// belong to no aggregate.
	ID string
	// Topic restricts the query to one topic; "" lists every topic.
	Topic string
	// Before is where the previous page ended, its [AggregatePage.Next];
	// zero starts from the newest event.
	Before AggregateCursor
	// Limit is the page size. Default 100, at most 10000.
	Limit int
}

// AggregateCursor is an event's place in its aggregate's newest-first
// order: when it was written (the store's clock, as [Event.CreatedAt]),
// then its id. Its String form, which [ParseAggregateCursor] reads, goes
// in a URL or on a command line.
type AggregateCursor struct {
	CreatedAt time.Time
	ID        string
}

// IsZero reports whether c is the zero cursor: the start of the events.
func (c AggregateCursor) IsZero() bool { return c.CreatedAt.IsZero() && c.ID == "" }

// String returns c as its creation time (RFC 3339, UTC, to the
// nanosecond), a slash, and its event id; "" for the zero cursor.
func (c AggregateCursor) String() string {
	if c.IsZero() {
		return ""
	}
	return c.CreatedAt.UTC().Format(time.RFC3339Nano) + "/" + c.ID
}

// ParseAggregateCursor reads a cursor in the form of
// [AggregateCursor.String]; "" is the zero cursor. Other input returns an
// error matching [ErrInvalidRequest].
func ParseAggregateCursor(s string) (AggregateCursor, error) {
	if s == "" {
		return AggregateCursor{}, nil
	}
	at, id, found := strings.Cut(s, "/")
	t, err := time.Parse(time.RFC3339Nano, at)
	if !found || id == "" || err != nil {
		return AggregateCursor{}, invalidRequest("aggregate cursor %q is not a time, a slash and an event id", s)
	}
	return AggregateCursor{CreatedAt: t, ID: id}, nil
}

// AggregatePage is a page of one aggregate's events.
type AggregatePage struct {
	// Events are the page's events, newest first: by CreatedAt, then by
	// event id (in the database's order of the id column), both
	// descending.
	Events []Event
	// Next is where the next page starts, the place of the page's last
	// event; zero when no older event is left.
	Next AggregateCursor
}

// AggregateEvents lists the events of the aggregate q names, whatever
// their status, newest first, a page at a time: what an operator asks of
// one entity ("what happened to order 42?"). It reads the aggregate index
// of migration 6 (4 on MySQL), in proportion to the page, not to the
// table. A store configured to delete delivered events has no DONE events
// to list. An aggregate id that is missing returns an error matching
// [ErrInvalidRequest].
func (s *Store[Tx]) AggregateEvents(ctx context.Context, q AggregateQuery) (AggregatePage, error) {
	if q.ID == "" {
		return AggregatePage{}, invalidRequest("aggregate query without an aggregate id")
	}
	if q.Before.CreatedAt.IsZero() != (q.Before.ID == "") {
		return AggregatePage{}, invalidRequest("aggregate cursor needs both a creation time and an event id")
	}
	limit, err := normalizeLimit(q.Limit, defaultDeadLimit, maxDeadLimit)
	if err != nil {
		return AggregatePage{}, err
	}
	p := outboxdriver.QueryAggregateParams{Type: string(cmp.Or(q.Type, GlobalAggregate)), ID: q.ID, Topic: q.Topic, Limit: limit + 1}
	if !q.Before.IsZero() {
		p.Before = &outboxdriver.AggregateCursor{CreatedAt: q.Before.CreatedAt, ID: q.Before.ID}
	}
	// One row more than the page tells whether another page follows.
	rows, err := s.driver.QueryAggregate(ctx, p)
	if err != nil {
		return AggregatePage{}, err
	}
	var page AggregatePage
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		page.Next = AggregateCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	page.Events = eventsOf(rows)
	return page, nil
}
