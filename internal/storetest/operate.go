package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// The operator API: dead filters, groups, stats, pending events, purges
// of DEAD events and leases.

// grouped is o with its error's failure group, as the relay records it.
func grouped(o outboxdriver.Outcome) outboxdriver.Outcome {
	o.ErrorGroup, _ = codec.ErrorGroup(o.Error)
	return o
}

// groupOf is the failure group of err.
func groupOf(err string) string {
	key, _ := codec.ErrorGroup(err)
	return key
}

// deadIDs returns the ids of the DEAD events matching filter, in id
// order, through QueryDead, and checks that CountDead agrees.
func (f *fixture[Tx]) deadIDs(t *testing.T, filter outbox.DeadFilter) []string {
	t.Helper()
	page, err := f.Store.QueryDead(t.Context(), outbox.DeadQuery{DeadFilter: filter, Limit: 1000})
	require.NoError(t, err)
	n, err := f.Store.CountDead(t.Context(), filter)
	require.NoError(t, err)
	require.Len(t, page, int(n), "CountDead counts what QueryDead finds")
	return IDs(page)
}

// deadSet writes and kills four events that differ in every field a dead
// filter reads, and an event that matches them all but stays NEW:
//
//	id  type topic aggregate     error                              group       died at
//	[0] A    t1    Order/1       timeout talking to 10.0.0.1:5432   its own     Start
//	[1] B    t2    Order/2       Order 17 NOT FOUND                 its own     Start+1h
//	[2] A    t2    Invoice/1     100%_done                          its own     Start+2h
//	[3] A    t1    __GLOBAL__    order 18 not found                 NULL        Start+2h
func (f *fixture[Tx]) deadSet(t *testing.T) []string {
	t.Helper()
	mk := func(typ outbox.EventType, topic string, aggType outbox.AggregateType, aggID string) outbox.Envelope {
		return outbox.Envelope{Type: typ, Topic: topic, AggregateType: aggType, AggregateID: aggID, PayloadJSON: []byte(`{}`)}
	}
	ids := f.write(t, mk("A", "t1", "Order", "1"), mk("B", "t2", "Order", "2"), mk("A", "t2", "Invoice", "1"),
		mk("A", "t1", "", ""), mk("A", "t1", "Order", "1"))
	require.EqualValues(t, 1, f.record(t, "", grouped(dead(ids[0], "timeout talking to 10.0.0.1:5432"))))
	f.Clock.Advance(time.Hour)
	require.EqualValues(t, 1, f.record(t, "", grouped(dead(ids[1], "Order 17 NOT FOUND"))))
	f.Clock.Advance(time.Hour)
	require.EqualValues(t, 2, f.record(t, "", grouped(dead(ids[2], "100%_done")), dead(ids[3], "order 18 not found")))
	return ids[:4]
}

// Each field of a dead filter restricts on its own, and with the others.
func testDeadFilterFields[Tx any](t *testing.T, f *fixture[Tx]) {
	d := f.deadSet(t)
	pick := func(is ...int) []string {
		out := make([]string, len(is))
		for i, n := range is {
			out[i] = d[n]
		}
		return out
	}
	tests := []struct {
		name   string
		filter outbox.DeadFilter
		want   []string
	}{
		{"aggregate type", outbox.DeadFilter{AggregateType: "Order"}, pick(0, 1)},
		{"aggregate id", outbox.DeadFilter{AggregateID: "1"}, pick(0, 2)},
		{"aggregate", outbox.DeadFilter{AggregateType: "Invoice", AggregateID: "1"}, pick(2)},
		{"error ignoring case", outbox.DeadFilter{ErrorContains: "not found"}, pick(1, 3)},
		{"error in capitals", outbox.DeadFilter{ErrorContains: "NOT Found"}, pick(1, 3)},
		{"error with %", outbox.DeadFilter{ErrorContains: "%"}, pick(2)},
		{"error with _ and %", outbox.DeadFilter{ErrorContains: "0%_d"}, pick(2)},
		{"_ is no wildcard", outbox.DeadFilter{ErrorContains: "o_d"}, nil},
		{"% is no wildcard", outbox.DeadFilter{ErrorContains: "order%found"}, nil},
		{"group", outbox.DeadFilter{Group: groupOf("Order 17 NOT FOUND")}, pick(1)},
		{"group of another id", outbox.DeadFilter{Group: groupOf("Order 99 NOT FOUND")}, pick(1)},
		{"unknown group", outbox.DeadFilter{Group: "0123456789abcdef"}, nil},
		{"ungrouped", outbox.DeadFilter{Group: outbox.UngroupedDead}, pick(3)},
		{"died after", outbox.DeadFilter{DiedAfter: Start.Add(time.Hour)}, pick(1, 2, 3)},
		{"died between", outbox.DeadFilter{DiedAfter: Start.Add(time.Hour), DiedBefore: Start.Add(2 * time.Hour)}, pick(1)},
		{"every field", outbox.DeadFilter{IDs: d, EventType: "A", Topic: "t2", AggregateType: "Invoice", AggregateID: "1",
			ErrorContains: "DONE", Group: groupOf("100%_done"), DiedAfter: Start, DiedBefore: f.Clock.Now().Add(time.Second)}, pick(2)},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, nilIfEmpty(f.deadIDs(t, tt.filter)), tt.name)
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// ReplayDead and PurgeDead refuse a filter that restricts nothing, and
// take any one field alone.
func testDeadActionsNeedAFilter[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	d := f.deadSet(t)
	_, err := f.Store.ReplayDead(ctx, outbox.DeadFilter{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	_, err = f.Store.PurgeDead(ctx, outbox.DeadFilter{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	// Each field alone, matching nothing.
	for _, filter := range []outbox.DeadFilter{
		{IDs: []string{"none"}}, {EventType: "none"}, {Topic: "none"}, {AggregateType: "none"}, {AggregateID: "none"},
		{ErrorContains: "none"}, {Group: "0123456789abcdef"}, {DiedAfter: f.Clock.Now().Add(time.Hour)},
		{DiedBefore: Start.Add(-time.Hour)},
	} {
		n, err := f.Store.ReplayDead(ctx, filter)
		require.NoError(t, err, "%+v", filter)
		require.Zero(t, n, "%+v", filter)
		n, err = f.Store.PurgeDead(ctx, filter)
		require.NoError(t, err, "%+v", filter)
		require.Zero(t, n, "%+v", filter)
	}
	f.requireDead(t, d)
	n, err := f.Store.ReplayDead(ctx, outbox.DeadFilter{Group: outbox.UngroupedDead})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	e := f.get(t, d[3])
	require.Equal(t, outbox.StatusNew, e.Status)
	n, err = f.Store.PurgeDead(ctx, outbox.DeadFilter{ErrorContains: "not found"})
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the replayed event is not DEAD any more")
	require.Equal(t, d[:1], nilIfEmpty(f.deadIDs(t, outbox.DeadFilter{AggregateType: "Order"})))
}

// PurgeDeadBatch deletes DEAD rows of its filter in batches, and no other
// row.
func testPurgeDeadBatch[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	t1 := f.write(t, JSONEvents(10, "t1")...)
	t2 := f.write(t, JSONEvents(3, "t2")...)
	others := f.write(t, JSONEvents(6, "t1")...)
	var outcomes []outboxdriver.Outcome
	for _, id := range append(t1, t2...) {
		outcomes = append(outcomes, grouped(dead(id, "broken")))
	}
	outcomes = append(outcomes, grouped(retry(others[0], Start.Add(time.Hour), "broken")),
		grouped(retry(others[1], Start.Add(time.Hour), "broken")))
	require.EqualValues(t, 15, f.record(t, "", outcomes...))
	require.EqualValues(t, 2, f.markDone(t, others[2:4]...))
	// others[4:] stay NEW.

	n, err := f.driver.PurgeDeadBatch(ctx, outboxdriver.PurgeDeadParams{Filter: outboxdriver.DeadFilter{Topic: "t1"}, Limit: 4})
	require.NoError(t, err)
	require.EqualValues(t, 4, n, "one batch, of its limit")
	require.Len(t, f.deadIDs(t, outbox.DeadFilter{Topic: "t1"}), 6)
	n, err = f.Store.PurgeDead(ctx, outbox.DeadFilter{Topic: "t1", Group: groupOf("broken")})
	require.NoError(t, err)
	require.EqualValues(t, 6, n, "the rest of t1's DEAD events")
	require.Equal(t, t2, f.deadIDs(t, outbox.DeadFilter{}), "t2's are left")
	require.Equal(t, 3+len(others), f.Count(t), "no row of another status is purged")
	for _, id := range others {
		require.NotEqual(t, outbox.StatusDead, f.get(t, id).Status)
	}
}

// Stats counts every topic's rows by status, the earliest due time of its
// due pending rows, and the leases running by owner and topic.
func testStats[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	a := f.write(t, JSONEvents(3, "a")...)
	b := f.write(t, JSONEvents(2, "b")...)
	later := JSONEvent(9)
	later.Topic, later.DeliverAfter = "a", Start.Add(time.Hour)
	f.write(t, later)
	require.EqualValues(t, 1, f.markDone(t, a[0]))
	require.EqualValues(t, 2, f.record(t, "", retry(a[1], Start.Add(time.Hour), "later"), dead(b[0], "dead")))
	// b[1] is claimed by r2 for 30s, which run out; a[2] by r1 for 5
	// minutes, still running at the snapshot.
	require.Equal(t, b[1:], f.claim(t, request{Owner: "r2", Topic: "b", Lease: 30 * time.Second}))
	f.Clock.Advance(time.Second)
	claimedAt := f.Clock.Now()
	require.Equal(t, a[2:], f.claim(t, request{Owner: "r1", Topic: "a"}))
	f.Clock.Advance(time.Minute)

	stats, err := f.Store.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, f.Clock.Now(), stats.At)
	require.Equal(t, []outbox.TopicStats{
		{Topic: "a", New: 2, Retry: 1, Done: 1, OldestDue: Start},
		{Topic: "b", New: 1, Dead: 1, OldestDue: Start},
	}, utcTopics(stats.Topics), "OldestDue counts due pending rows, leased or not, and not the RETRY due later")
	require.Len(t, stats.Claims, 1, "a lease that ran out is no claim")
	c := stats.Claims[0]
	require.Equal(t, "r1", c.Owner)
	require.Equal(t, "a", c.Topic)
	require.EqualValues(t, 1, c.Events)
	require.True(t, claimedAt.Equal(c.OldestClaim), "%v", c.OldestClaim)
	require.True(t, claimedAt.Add(DefaultLease).Equal(c.LeaseEnds), "%v", c.LeaseEnds)

	// The relay's periodic read: the pending rows alone, no leases.
	pending, err := f.Store.Driver().Stats(ctx, outboxdriver.StatsParams{Now: f.Clock.Now(), PendingOnly: true})
	require.NoError(t, err)
	require.Empty(t, pending.Claims)
	counts := map[string]int64{}
	for _, ts := range pending.Topics {
		counts[fmt.Sprintf("%s/%s", ts.Topic, outbox.Status(ts.Status))] += ts.Count
		if ts.Topic == "b" {
			require.True(t, Start.Equal(ts.OldestDue), "%v", ts.OldestDue)
		}
	}
	require.Equal(t, map[string]int64{"a/NEW": 2, "a/RETRY": 1, "b/NEW": 1}, counts)

	f.Clock.Set(Start.Add(2 * time.Hour))
	stats, err = f.Store.Stats(ctx)
	require.NoError(t, err)
	require.Empty(t, stats.Claims)
	require.Equal(t, Start, stats.Topics[0].OldestDue.UTC())
}

// utcTopics returns topics with their times in UTC, for comparison.
func utcTopics(topics []outbox.TopicStats) []outbox.TopicStats {
	for i := range topics {
		if !topics[i].OldestDue.IsZero() {
			topics[i].OldestDue = topics[i].OldestDue.UTC()
		}
	}
	return topics
}

// DeadGroups groups DEAD events by the failure group recorded with their
// error, NULL apart, the largest first.
func testDeadGroups[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	ids := f.write(t, append(JSONEvents(4, "t1"), JSONEvents(3, "t2")...)...)
	// Not found: ids[0], ids[1] (t1), ids[4] (t2); a timeout: ids[2]
	// (t1), ids[5] (t2); ungrouped: ids[3] (t1), ids[6] (t2).
	require.EqualValues(t, 2, f.record(t, "", grouped(dead(ids[0], "order 1 not found")),
		grouped(dead(ids[2], "timeout after 30s"))))
	f.Clock.Advance(time.Minute)
	require.EqualValues(t, 3, f.record(t, "", grouped(dead(ids[1], "order 22 not found")),
		dead(ids[3], "died before groups"), dead(ids[6], "died before groups too")))
	f.Clock.Advance(time.Minute)
	require.EqualValues(t, 2, f.record(t, "", grouped(dead(ids[4], "order 333 not found")),
		grouped(dead(ids[5], "timeout after 31s"))))

	notFound, timeout := groupOf("order 1 not found"), groupOf("timeout after 30s")
	require.Equal(t, notFound, f.get(t, ids[4]).ErrorGroup, "the group is recorded with the error")
	require.Empty(t, f.get(t, ids[3]).ErrorGroup, "an error without a group leaves NULL")

	groups, err := f.Store.DeadGroups(ctx, outbox.DeadGroupQuery{})
	require.NoError(t, err)
	require.Len(t, groups, 3)
	first := groups[0]
	require.Equal(t, notFound, first.Group)
	require.EqualValues(t, 3, first.Count)
	require.Equal(t, Start, first.FirstDied.UTC())
	require.Equal(t, Start.Add(2*time.Minute), first.LastDied.UTC())
	require.Equal(t, []string{"t1", "t2"}, first.Topics)
	require.Contains(t, []string{"order 1 not found", "order 22 not found", "order 333 not found"}, first.SampleError)
	require.Equal(t, "order <n> not found", first.Reason)
	// Two groups of two: by group name, the ungrouped ("" in the table)
	// first.
	require.Equal(t, outbox.UngroupedDead, groups[1].Group)
	require.EqualValues(t, 2, groups[1].Count)
	require.Empty(t, groups[1].Reason)
	require.Equal(t, []string{"t1", "t2"}, groups[1].Topics)
	require.Contains(t, []string{"died before groups", "died before groups too"}, groups[1].SampleError)
	require.Equal(t, timeout, groups[2].Group)
	require.EqualValues(t, 2, groups[2].Count)
	require.Equal(t, Start, groups[2].FirstDied.UTC())
	require.Equal(t, Start.Add(2*time.Minute), groups[2].LastDied.UTC())

	groups, err = f.Store.DeadGroups(ctx, outbox.DeadGroupQuery{Limit: 1})
	require.NoError(t, err)
	require.Len(t, groups, 1)
	require.Equal(t, notFound, groups[0].Group)

	groups, err = f.Store.DeadGroups(ctx, outbox.DeadGroupQuery{DeadFilter: outbox.DeadFilter{Topic: "t2", ErrorContains: "ORDER"}})
	require.NoError(t, err)
	require.Len(t, groups, 1)
	require.Equal(t, notFound, groups[0].Group)
	require.EqualValues(t, 1, groups[0].Count)
	require.Equal(t, "order 333 not found", groups[0].SampleError, "the sample matches the filter")
	require.Equal(t, []string{"t2"}, groups[0].Topics)

	groups, err = f.Store.DeadGroups(ctx, outbox.DeadGroupQuery{DeadFilter: outbox.DeadFilter{Group: outbox.UngroupedDead}})
	require.NoError(t, err)
	require.Len(t, groups, 1)
	require.Equal(t, outbox.UngroupedDead, groups[0].Group)

	// A RETRY records its group; an outcome without an error keeps it.
	more := f.write(t, JSONEvent(1))
	require.EqualValues(t, 1, f.record(t, "", grouped(retry(more[0], f.Clock.Now(), "timeout after 1s"))))
	f.Clock.Advance(time.Second) // MySQL counts changed rows only
	require.EqualValues(t, 1, f.record(t, "", deferral(more[0], f.Clock.Now(), "")))
	e := f.get(t, more[0])
	require.Equal(t, timeout, e.ErrorGroup)
	require.Equal(t, "timeout after 1s", e.LastError)
}

// QueryPending pages through NEW and RETRY events by id, of a topic or
// every one, of the statuses asked.
func testQueryPending[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	a := f.write(t, JSONEvents(5, "a")...)
	b := f.write(t, JSONEvents(2, "b")...)
	require.EqualValues(t, 1, f.markDone(t, a[0]))
	require.EqualValues(t, 3, f.record(t, "", dead(a[1], "dead"),
		retry(a[2], Start.Add(time.Hour), "later"), retry(b[1], Start.Add(time.Hour), "later")))

	query := func(q outbox.PendingQuery) []string {
		t.Helper()
		events, err := f.Store.QueryPending(ctx, q)
		require.NoError(t, err)
		for _, e := range events {
			require.True(t, e.Status.Pending(), e.ID)
		}
		return nilIfEmpty(IDs(events))
	}
	require.Equal(t, []string{a[2], a[3], a[4], b[0], b[1]}, query(outbox.PendingQuery{}))
	require.Equal(t, []string{a[2], b[1]}, query(outbox.PendingQuery{Statuses: []outbox.Status{outbox.StatusRetry}}))
	require.Equal(t, []string{a[3], a[4], b[0]}, query(outbox.PendingQuery{Statuses: []outbox.Status{outbox.StatusNew}}))
	require.Equal(t, []string{b[0], b[1]}, query(outbox.PendingQuery{Topic: "b"}))
	require.Equal(t, []string{b[0]}, query(outbox.PendingQuery{Topic: "b", Statuses: []outbox.Status{outbox.StatusNew}}))
	require.Nil(t, query(outbox.PendingQuery{Topic: "c"}))

	var paged []string
	q := outbox.PendingQuery{Limit: 2}
	for {
		page := query(q)
		if len(page) == 0 {
			break
		}
		require.LessOrEqual(t, len(page), 2)
		paged = append(paged, page...)
		q.After = page[len(page)-1]
	}
	require.Equal(t, []string{a[2], a[3], a[4], b[0], b[1]}, paged)

	e, err := f.Store.QueryPending(ctx, outbox.PendingQuery{Topic: "b", Statuses: []outbox.Status{outbox.StatusRetry}})
	require.NoError(t, err)
	require.Len(t, e, 1)
	require.Equal(t, f.get(t, b[1]), e[0], "a query reads rows as Get does")
}

// QueryEvents pages through the events of every status by id.
func testQueryEvents[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	events, err := f.Store.QueryEvents(ctx, outbox.EventQuery{})
	require.NoError(t, err)
	require.Empty(t, events)

	a := f.write(t, JSONEvents(4, "a")...)
	b := f.write(t, JSONEvents(1, "b")...)
	require.EqualValues(t, 1, f.markDone(t, a[0]))
	require.EqualValues(t, 2, f.record(t, "", dead(a[1], "dead"), retry(a[2], Start.Add(time.Hour), "later")))
	all := []string{a[0], a[1], a[2], a[3], b[0]}

	events, err = f.Store.QueryEvents(ctx, outbox.EventQuery{})
	require.NoError(t, err)
	require.Equal(t, all, IDs(events))
	statuses := make([]outbox.Status, len(events))
	for i, e := range events {
		statuses[i] = e.Status
		require.Equal(t, f.get(t, e.ID), e, "a query reads rows as Get does")
	}
	require.Equal(t, []outbox.Status{outbox.StatusDone, outbox.StatusDead, outbox.StatusRetry, outbox.StatusNew, outbox.StatusNew}, statuses)

	var paged []string
	q := outbox.EventQuery{Limit: 2}
	for {
		page, err := f.Store.QueryEvents(ctx, q)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		require.LessOrEqual(t, len(page), 2)
		paged = append(paged, IDs(page)...)
		q.After = page[len(page)-1].ID
	}
	require.Equal(t, all, paged)

	_, err = f.Store.QueryEvents(ctx, outbox.EventQuery{Limit: -1})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
}

// AcquireLease takes a lease that is free, expired or already the
// caller's, and no other.
func testAcquireLease[Tx any](t *testing.T, f *fixture[Tx]) {
	acquire := func(name, owner string, now time.Time, lease time.Duration) bool {
		t.Helper()
		held, err := f.driver.AcquireLease(t.Context(), outboxdriver.LeaseParams{Name: name, Owner: owner, Now: now, Until: now.Add(lease)})
		require.NoError(t, err)
		return held
	}
	now := f.Clock.Now()
	require.True(t, acquire("retention", "a", now, time.Minute), "a free lease")
	require.False(t, acquire("retention", "b", now.Add(30*time.Second), time.Minute), "another's running lease")
	require.True(t, acquire("other", "b", now, time.Minute), "leases of other names are apart")
	require.True(t, acquire("retention", "a", now.Add(30*time.Second), time.Minute), "a renewal")
	require.True(t, acquire("retention", "a", now.Add(30*time.Second), time.Minute), "a renewal to the same time")
	require.False(t, acquire("retention", "b", now.Add(89*time.Second), time.Minute), "the renewal runs until 90s")
	require.True(t, acquire("retention", "b", now.Add(90*time.Second), time.Minute), "an expired lease")
	require.False(t, acquire("retention", "a", now.Add(100*time.Second), time.Minute), "the former holder lost it")

	// Concurrent takers of a new lease: exactly one gets it.
	const takers = 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  []string
		errs []error
	)
	for i := range takers {
		owner := fmt.Sprint("taker-", i)
		wg.Go(func() {
			held, err := f.driver.AcquireLease(context.Background(), outboxdriver.LeaseParams{Name: "contended", Owner: owner,
				Now: now, Until: now.Add(time.Minute)})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if held {
				won = append(won, owner)
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Len(t, won, 1, "one taker gets the lease")
	require.True(t, acquire("contended", won[0], now, time.Minute), "the winner holds it")
}

// Retain, once on the real table: its first round takes the lease and
// purges old DONE and DEAD events and inbox records, and nothing else.
func testRetain[Tx any](t *testing.T, f *fixture[Tx]) {
	old := f.write(t, JSONEvents(4, "")...)
	require.EqualValues(t, 2, f.markDone(t, old[:2]...))
	require.EqualValues(t, 1, f.record(t, "", dead(old[2], "dead")))
	require.True(t, f.markProcessed(t, "consumer", "old"))
	f.Clock.Advance(8 * 24 * time.Hour)
	recent := f.write(t, JSONEvents(2, "")...)
	require.EqualValues(t, 1, f.markDone(t, recent[0]))
	require.EqualValues(t, 1, f.record(t, "", dead(recent[1], "dead")))
	require.True(t, f.markProcessed(t, "consumer", "recent"))

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- f.Store.Retain(ctx, outbox.RetentionConfig{Dead: 24 * time.Hour, BatchSize: 1})
	}()
	require.True(t, f.Clock.WaitForTimers(1, 30*time.Second), "the first round ends")
	cancel()
	require.NoError(t, <-done)

	require.Equal(t, 3, f.Count(t), "the old DONE and DEAD events are purged")
	for _, id := range append(old[3:], recent...) {
		f.get(t, id)
	}
	require.True(t, f.markProcessed(t, "consumer", "old"), "the old inbox record is purged")
	require.False(t, f.markProcessed(t, "consumer", "recent"))
	held, err := f.driver.AcquireLease(t.Context(), outboxdriver.LeaseParams{Name: outbox.RetentionLease, Owner: "another",
		Now: f.Clock.Now(), Until: f.Clock.Now().Add(time.Minute)})
	require.NoError(t, err)
	require.False(t, held, "the retention lease is held")
}
