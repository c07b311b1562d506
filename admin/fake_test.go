package admin_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wmoutbox/wmoutbox/admin"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// fakeStore is an in-memory admin.Store: it applies filters and paging as
// the real store does, replays and purges change its events, and it
// records the queries it was given.
type fakeStore struct {
	mu     sync.Mutex
	now    time.Time
	events map[string]outbox.Event
	claims []outbox.ClaimStats
	relays []outbox.RelayStats
	slots  []outbox.SlotStats
	// err, when set, is returned by every call.
	err error

	groupQueries   []outbox.DeadGroupQuery
	deadQueries    []outbox.DeadQuery
	counts         []outbox.DeadFilter
	pendingQueries []outbox.PendingQuery
	aggQueries     []outbox.AggregateQuery
	replays        []outbox.DeadFilter
	purges         []outbox.DeadFilter
}

var _ admin.Store = (*fakeStore)(nil)

var fakeNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func newFakeStore(events ...outbox.Event) *fakeStore {
	s := &fakeStore{now: fakeNow, events: map[string]outbox.Event{}}
	for _, e := range events {
		s.events[e.ID] = e
	}
	return s
}

// deadEvent returns a DEAD event of topic that failed with err in group,
// i minutes before fakeNow.
func deadEvent(id, topic, group, err string, i int) outbox.Event {
	at := fakeNow.Add(-time.Duration(i) * time.Minute)
	return outbox.Event{
		Envelope: outbox.Envelope{
			ID: id, Type: "OrderCreated", Topic: topic, AggregateType: "order", AggregateID: "o-" + id,
			OccurredAt: at, Headers: map[string]string{"trace": "t-" + id}, PayloadJSON: []byte(`{"order":"` + id + `"}`),
		},
		Status: outbox.StatusDead, Attempts: 10, CreatedAt: at, UpdatedAt: at, AvailableAt: at,
		LastError: err, ErrorGroup: group,
	}
}

func pendingEvent(id, topic string, st outbox.Status) outbox.Event {
	return outbox.Event{
		Envelope:  outbox.Envelope{ID: id, Type: "OrderCreated", Topic: topic, AggregateType: "order", PayloadBytes: []byte{0, 1, 2}},
		Status:    st,
		CreatedAt: fakeNow.Add(-time.Hour), UpdatedAt: fakeNow.Add(-time.Hour), AvailableAt: fakeNow.Add(-time.Hour),
	}
}

// snapshot returns a copy of the events, to compare before and after.
func (s *fakeStore) snapshot() map[string]outbox.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.events)
}

// matches applies a DeadFilter as the dialects do.
func matches(f *outbox.DeadFilter, e *outbox.Event) bool {
	switch {
	case e.Status != outbox.StatusDead:
		return false
	case f.IDs != nil && !slices.Contains(f.IDs, e.ID):
		return false
	case f.EventType != "" && e.Type != f.EventType,
		f.Topic != "" && e.Topic != f.Topic,
		f.AggregateType != "" && e.AggregateType != f.AggregateType,
		f.AggregateID != "" && e.AggregateID != f.AggregateID:
		return false
	case f.ErrorContains != "" && !strings.Contains(strings.ToLower(e.LastError), strings.ToLower(f.ErrorContains)):
		return false
	case f.Group == outbox.UngroupedDead && e.ErrorGroup != "",
		f.Group != "" && f.Group != outbox.UngroupedDead && e.ErrorGroup != f.Group:
		return false
	case !f.DiedAfter.IsZero() && e.UpdatedAt.Before(f.DiedAfter),
		!f.DiedBefore.IsZero() && !e.UpdatedAt.Before(f.DiedBefore):
		return false
	}
	return true
}

func restrictsAll(f *outbox.DeadFilter) bool {
	return f.IDs != nil || f.EventType != "" || f.Topic != "" || f.AggregateType != "" || f.AggregateID != "" ||
		f.ErrorContains != "" || f.Group != "" || !f.DiedAfter.IsZero() || !f.DiedBefore.IsZero()
}

// sorted returns the events that keep, by id.
func (s *fakeStore) sorted(keep func(*outbox.Event) bool) []outbox.Event {
	var out []outbox.Event
	for _, e := range s.events {
		if keep(&e) {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b outbox.Event) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// page returns the events after the id after, at most limit.
func page(events []outbox.Event, after string, limit int) []outbox.Event {
	i, _ := slices.BinarySearchFunc(events, after, func(e outbox.Event, id string) int {
		if e.ID <= id {
			return -1
		}
		return 1
	})
	events = events[i:]
	if len(events) > limit {
		events = events[:limit]
	}
	return events
}

func (s *fakeStore) Stats(context.Context) (outbox.Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return outbox.Stats{}, s.err
	}
	byTopic := map[string]*outbox.TopicStats{}
	for _, e := range s.events {
		t := byTopic[e.Topic]
		if t == nil {
			t = &outbox.TopicStats{Topic: e.Topic}
			byTopic[e.Topic] = t
		}
		switch e.Status {
		case outbox.StatusNew:
			t.New++
		case outbox.StatusRetry:
			t.Retry++
		case outbox.StatusDone:
			t.Done++
		case outbox.StatusDead:
			t.Dead++
		}
		if e.Status.Pending() && !e.AvailableAt.After(s.now) && (t.OldestDue.IsZero() || e.AvailableAt.Before(t.OldestDue)) {
			t.OldestDue = e.AvailableAt
		}
	}
	st := outbox.Stats{At: s.now, Claims: s.claims, Relays: s.relays, Slots: s.slots}
	for _, k := range slices.Sorted(maps.Keys(byTopic)) {
		st.Topics = append(st.Topics, *byTopic[k])
	}
	return st, nil
}

func (s *fakeStore) DeadGroups(_ context.Context, q outbox.DeadGroupQuery) ([]outbox.DeadGroup, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groupQueries = append(s.groupQueries, q)
	if s.err != nil {
		return nil, s.err
	}
	byGroup := map[string]*outbox.DeadGroup{}
	for _, e := range s.sorted(func(e *outbox.Event) bool { return matches(&q.DeadFilter, e) }) {
		name := cmp.Or(e.ErrorGroup, outbox.UngroupedDead)
		g := byGroup[name]
		if g == nil {
			g = &outbox.DeadGroup{Group: name, FirstDied: e.UpdatedAt}
			if e.ErrorGroup != "" {
				g.Reason = "reason of " + e.ErrorGroup
			}
			byGroup[name] = g
		}
		g.Count++
		g.SampleError = e.LastError
		g.FirstDied = minTime(g.FirstDied, e.UpdatedAt)
		g.LastDied = maxTime(g.LastDied, e.UpdatedAt)
		if !slices.Contains(g.Topics, e.Topic) {
			g.Topics = append(g.Topics, e.Topic)
			slices.Sort(g.Topics)
		}
	}
	groups := make([]outbox.DeadGroup, 0, len(byGroup))
	for _, g := range byGroup {
		groups = append(groups, *g)
	}
	slices.SortFunc(groups, func(a, b outbox.DeadGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Group, b.Group))
	})
	limit := cmp.Or(q.Limit, 100)
	if len(groups) > limit {
		groups = groups[:limit]
	}
	return groups, nil
}

func (s *fakeStore) QueryDead(_ context.Context, q outbox.DeadQuery) ([]outbox.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deadQueries = append(s.deadQueries, q)
	if s.err != nil {
		return nil, s.err
	}
	return page(s.sorted(func(e *outbox.Event) bool { return matches(&q.DeadFilter, e) }), q.After, cmp.Or(q.Limit, 100)), nil
}

func (s *fakeStore) CountDead(_ context.Context, f outbox.DeadFilter) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts = append(s.counts, f)
	if s.err != nil {
		return 0, s.err
	}
	return int64(len(s.sorted(func(e *outbox.Event) bool { return matches(&f, e) }))), nil
}

func (s *fakeStore) QueryPending(_ context.Context, q outbox.PendingQuery) ([]outbox.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pendingQueries = append(s.pendingQueries, q)
	if s.err != nil {
		return nil, s.err
	}
	statuses := q.Statuses
	if statuses == nil {
		statuses = []outbox.Status{outbox.StatusNew, outbox.StatusRetry}
	}
	events := s.sorted(func(e *outbox.Event) bool {
		return slices.Contains(statuses, e.Status) && (q.Topic == "" || e.Topic == q.Topic)
	})
	return page(events, q.After, cmp.Or(q.Limit, 100)), nil
}

func (s *fakeStore) AggregateEvents(_ context.Context, q outbox.AggregateQuery) (outbox.AggregatePage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.aggQueries = append(s.aggQueries, q)
	if s.err != nil {
		return outbox.AggregatePage{}, s.err
	}
	events := s.sorted(func(e *outbox.Event) bool {
		return e.AggregateID == q.ID && e.AggregateType == cmp.Or(q.Type, outbox.GlobalAggregate) && (q.Topic == "" || e.Topic == q.Topic) &&
			(q.Before.IsZero() || e.CreatedAt.Before(q.Before.CreatedAt) || e.CreatedAt.Equal(q.Before.CreatedAt) && e.ID < q.Before.ID)
	})
	slices.SortStableFunc(events, func(a, b outbox.Event) int { return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.ID, a.ID)) })
	var page outbox.AggregatePage
	if limit := cmp.Or(q.Limit, 100); len(events) > limit {
		events = events[:limit]
		page.Next = outbox.AggregateCursor{CreatedAt: events[limit-1].CreatedAt, ID: events[limit-1].ID}
	}
	page.Events = events
	return page, nil
}

func (s *fakeStore) Get(_ context.Context, id string) (outbox.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return outbox.Event{}, s.err
	}
	e, ok := s.events[id]
	if !ok {
		return outbox.Event{}, fmt.Errorf("%w: %s", outbox.ErrNotFound, id)
	}
	return e, nil
}

func (s *fakeStore) ReplayDead(_ context.Context, f outbox.DeadFilter) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replays = append(s.replays, f)
	if err := s.check(&f); err != nil {
		return 0, err
	}
	var n int64
	for id, e := range s.events {
		if matches(&f, &e) {
			e.Status, e.Attempts, e.AvailableAt, e.UpdatedAt = outbox.StatusNew, 0, s.now, s.now
			s.events[id] = e
			n++
		}
	}
	return n, nil
}

func (s *fakeStore) PurgeDead(_ context.Context, f outbox.DeadFilter) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purges = append(s.purges, f)
	if err := s.check(&f); err != nil {
		return 0, err
	}
	var n int64
	for id, e := range s.events {
		if matches(&f, &e) {
			delete(s.events, id)
			n++
		}
	}
	return n, nil
}

// check returns the error of a replay or purge before it changes
// anything: the injected one, or the store's refusal of a filter that
// restricts nothing.
func (s *fakeStore) check(f *outbox.DeadFilter) error {
	if s.err != nil {
		return s.err
	}
	if !restrictsAll(f) {
		return fmt.Errorf("%w: filter restricts nothing", outbox.ErrInvalidRequest)
	}
	return nil
}

func minTime(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

var errStoreDown = errors.New("connection refused")
