package outbox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// Stats asks at the store's clock, and adds up the driver's parts in
// whatever order they come: a topic's statuses, a (topic, status) or an
// (owner, topic) in several parts.
func TestStatsMergesTheDriversParts(t *testing.T) {
	t.Parallel()
	at := func(m int) time.Time { return storeNow.Add(time.Duration(m) * time.Minute) }
	b := setupStore(t, func(d *fakeDriver[*fakeTx]) {
		d.stats = outboxdriver.StatsResult{
			Topics: []outboxdriver.TopicStatus{
				{Topic: "b", Status: int16(outbox.StatusDead), Count: 4},
				{Topic: "a", Status: int16(outbox.StatusNew), Count: 2, OldestDue: at(-5)},
				{Topic: "b", Status: int16(outbox.StatusNew), Count: 1},
				{Topic: "a", Status: int16(outbox.StatusRetry), Count: 3, OldestDue: at(-9)},
				{Topic: "a", Status: int16(outbox.StatusDone), Count: 7},
				{Topic: "a", Status: int16(outbox.StatusNew), Count: 1, OldestDue: at(-7)},
			},
			Claims: []outboxdriver.OwnerClaims{
				{Owner: "r2", Topic: "a", Events: 1, OldestClaim: at(-1), LeaseEnds: at(4)},
				{Owner: "r1", Topic: "b", Events: 2, OldestClaim: at(-2), LeaseEnds: at(3)},
				{Owner: "r1", Topic: "a", Events: 5, OldestClaim: at(-1), LeaseEnds: at(4)},
				{Owner: "r1", Topic: "a", Events: 1, OldestClaim: at(-3), LeaseEnds: at(2)},
			},
		}
	})
	stats, err := b.store.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, []outboxdriver.StatsParams{{Now: storeNow}}, b.driver.statsCalls)
	require.Equal(t, outbox.Stats{
		At: storeNow,
		Topics: []outbox.TopicStats{
			{Topic: "a", New: 3, Retry: 3, Done: 7, OldestDue: at(-9)},
			{Topic: "b", New: 1, Dead: 4},
		},
		Claims: []outbox.ClaimStats{
			{Owner: "r1", Topic: "a", Events: 6, OldestClaim: at(-3), LeaseEnds: at(4)},
			{Owner: "r1", Topic: "b", Events: 2, OldestClaim: at(-2), LeaseEnds: at(3)},
			{Owner: "r2", Topic: "a", Events: 1, OldestClaim: at(-1), LeaseEnds: at(4)},
		},
	}, stats)
	require.EqualValues(t, 6, stats.Topics[0].Pending())

	b.driver.set(func(d *fakeDriver[*fakeTx]) { d.err = errors.New("down") })
	_, err = b.store.Stats(t.Context())
	require.ErrorContains(t, err, "down")
}

// DeadGroups maps the group of NULL rows to UngroupedDead, and a filter of
// UngroupedDead to the driver's Ungrouped; the reason comes from the
// sample error.
func TestDeadGroups(t *testing.T) {
	t.Parallel()
	key, _ := codec.ErrorGroup("order 12 not found")
	b := setupStore(t, func(d *fakeDriver[*fakeTx]) {
		d.groups = []outboxdriver.DeadGroup{
			{Group: key, Count: 3, SampleError: "order 12 not found", Topics: []string{"a"}},
			{Group: "", Count: 1, SampleError: "old"},
		}
	})
	groups, err := b.store.DeadGroups(t.Context(), outbox.DeadGroupQuery{DeadFilter: outbox.DeadFilter{Topic: "a"}})
	require.NoError(t, err)
	require.Equal(t, []outbox.DeadGroup{
		{Group: key, Reason: "order <n> not found", SampleError: "order 12 not found", Count: 3, Topics: []string{"a"}},
		{Group: outbox.UngroupedDead, SampleError: "old", Count: 1},
	}, groups)

	_, err = b.store.DeadGroups(t.Context(), outbox.DeadGroupQuery{DeadFilter: outbox.DeadFilter{Group: outbox.UngroupedDead}, Limit: 1000})
	require.NoError(t, err)
	_, err = b.store.DeadGroups(t.Context(), outbox.DeadGroupQuery{DeadFilter: outbox.DeadFilter{Group: key}, Limit: 7})
	require.NoError(t, err)
	require.Equal(t, []outboxdriver.DeadGroupsParams{
		{Filter: outboxdriver.DeadFilter{Topic: "a"}, Limit: 100},
		{Filter: outboxdriver.DeadFilter{Ungrouped: true}, Limit: 1000},
		{Filter: outboxdriver.DeadFilter{Group: key}, Limit: 7},
	}, b.driver.groupQueries)

	for _, limit := range []int{-1, 1001} {
		_, err = b.store.DeadGroups(t.Context(), outbox.DeadGroupQuery{Limit: limit})
		require.ErrorIs(t, err, outbox.ErrInvalidRequest, limit)
	}
	require.Len(t, b.driver.groupQueries, 3, "an invalid query reaches no driver")
}

// Every field of a dead filter reaches the driver.
func TestDeadFilterReachesTheDriver(t *testing.T) {
	t.Parallel()
	b := setupStore(t, nil)
	after, before := storeNow.Add(-time.Hour), storeNow
	_, err := b.store.CountDead(t.Context(), outbox.DeadFilter{IDs: []string{"x"}, EventType: "T", Topic: "t",
		AggregateType: "Order", AggregateID: "1", ErrorContains: "boom", Group: "g", DiedAfter: after, DiedBefore: before})
	require.NoError(t, err)
	require.Equal(t, []outboxdriver.DeadFilter{{IDs: []string{"x"}, EventType: "T", Topic: "t", AggregateType: "Order",
		AggregateID: "1", ErrorContains: "boom", Group: "g", DiedAfter: after, DiedBefore: before}}, b.driver.counted)
}

// ReplayDead and PurgeDead refuse a filter that restricts nothing, and
// take any one field.
func TestDeadActionsNeedAFilter(t *testing.T) {
	t.Parallel()
	b := setupStore(t, nil)
	_, err := b.store.ReplayDead(t.Context(), outbox.DeadFilter{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	_, err = b.store.PurgeDead(t.Context(), outbox.DeadFilter{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	require.Empty(t, b.driver.Log())
	filters := []outbox.DeadFilter{
		{IDs: []string{}}, {EventType: "T"}, {Topic: "t"}, {AggregateType: "A"}, {AggregateID: "1"},
		{ErrorContains: "x"}, {Group: "g"}, {Group: outbox.UngroupedDead}, {DiedAfter: storeNow}, {DiedBefore: storeNow},
	}
	for _, f := range filters {
		_, err = b.store.ReplayDead(t.Context(), f)
		require.NoError(t, err, "%+v", f)
		_, err = b.store.PurgeDead(t.Context(), f)
		require.NoError(t, err, "%+v", f)
	}
	require.Len(t, b.driver.replays, len(filters))
	require.Len(t, b.driver.deadPurges, len(filters))
	require.Equal(t, outboxdriver.PurgeDeadParams{Filter: outboxdriver.DeadFilter{Ungrouped: true}, Limit: 1000}, b.driver.deadPurges[7])
}

// PurgeDead deletes in batches of 1000 until one comes back short.
func TestPurgeDeadInBatches(t *testing.T) {
	t.Parallel()
	b := setupStore(t, func(d *fakeDriver[*fakeTx]) {
		d.batches = []batchResult{{n: 1000}, {n: 1000}, {n: 3}, {n: 1000}}
	})
	n, err := b.store.PurgeDead(t.Context(), outbox.DeadFilter{Topic: "t"})
	require.NoError(t, err)
	require.EqualValues(t, 2003, n)
	require.Len(t, b.driver.deadPurges, 3)

	b = setupStore(t, func(d *fakeDriver[*fakeTx]) {
		d.batches = []batchResult{{n: 1000}, {err: errors.New("down")}}
	})
	n, err = b.store.PurgeDead(t.Context(), outbox.DeadFilter{Topic: "t"})
	require.ErrorContains(t, err, "after 1000 rows")
	require.EqualValues(t, 1000, n)
}

// Purge reports the running total after each batch.
func TestPurgeProgress(t *testing.T) {
	t.Parallel()
	b := setupStore(t, func(d *fakeDriver[*fakeTx]) {
		d.batches = []batchResult{{n: 10}, {n: 10}, {n: 4}}
	})
	var progress []int64
	n, err := b.store.Purge(t.Context(), outbox.PurgeRequest{OlderThan: time.Hour, BatchSize: 10,
		Progress: func(deleted int64) { progress = append(progress, deleted) }})
	require.NoError(t, err)
	require.EqualValues(t, 24, n)
	require.Equal(t, []int64{10, 20, 24}, progress)
}

// QueryPending asks for NEW and RETRY unless told, refuses other
// statuses, and bounds its page.
func TestQueryPending(t *testing.T) {
	t.Parallel()
	b := setupStore(t, func(d *fakeDriver[*fakeTx]) {
		d.pending = []outboxdriver.Row{{ID: "a", Status: int16(outbox.StatusRetry), Payload: []byte{}, ErrorGroup: "g"}}
	})
	events, err := b.store.QueryPending(t.Context(), outbox.PendingQuery{Topic: "t", After: "x"})
	require.NoError(t, err)
	require.Len(t, events, 1)
	require.Equal(t, "a", events[0].ID)
	require.Equal(t, "g", events[0].ErrorGroup)
	_, err = b.store.QueryPending(t.Context(), outbox.PendingQuery{Statuses: []outbox.Status{outbox.StatusRetry}, Limit: 10000})
	require.NoError(t, err)
	require.Equal(t, []outboxdriver.QueryPendingParams{
		{Topic: "t", Statuses: []int16{int16(outbox.StatusNew), int16(outbox.StatusRetry)}, After: "x", Limit: 100},
		{Statuses: []int16{int16(outbox.StatusRetry)}, Limit: 10000},
	}, b.driver.pendingCalls)

	for _, q := range []outbox.PendingQuery{
		{Statuses: []outbox.Status{outbox.StatusDone}},
		{Statuses: []outbox.Status{outbox.StatusNew, outbox.StatusDead}},
		{Limit: -1},
		{Limit: 10001},
	} {
		_, err = b.store.QueryPending(t.Context(), q)
		require.ErrorIs(t, err, outbox.ErrInvalidRequest, "%+v", q)
	}
	require.Len(t, b.driver.pendingCalls, 2, "an invalid query reaches no driver")
}

// AggregateEvents names the global aggregate type when none is given,
// asks for one row more than the page to tell whether another follows,
// and refuses a query without an aggregate id or with half a cursor.
func TestAggregateEvents(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	b := setupStore(t, func(d *fakeDriver[*fakeTx]) {
		d.pending = []outboxdriver.Row{
			{ID: "c", CreatedAt: at.Add(2 * time.Second), Payload: []byte{}},
			{ID: "b", CreatedAt: at.Add(time.Second), Payload: []byte{}},
			{ID: "a", CreatedAt: at, Payload: []byte{}},
		}
	})
	page, err := b.store.AggregateEvents(t.Context(), outbox.AggregateQuery{ID: "42", Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"c", "b"}, []string{page.Events[0].ID, page.Events[1].ID})
	require.Equal(t, outbox.AggregateCursor{CreatedAt: at.Add(time.Second), ID: "b"}, page.Next)

	page, err = b.store.AggregateEvents(t.Context(), outbox.AggregateQuery{Type: "Order", ID: "42", Topic: "orders", Before: page.Next})
	require.NoError(t, err)
	require.Len(t, page.Events, 3)
	require.True(t, page.Next.IsZero(), "the last page has no next")
	require.Equal(t, []outboxdriver.QueryAggregateParams{
		{Type: string(outbox.GlobalAggregate), ID: "42", Limit: 3},
		{Type: "Order", ID: "42", Topic: "orders", Before: &outboxdriver.AggregateCursor{CreatedAt: at.Add(time.Second), ID: "b"}, Limit: 101},
	}, b.driver.aggCalls)

	for _, q := range []outbox.AggregateQuery{
		{Type: "Order"},
		{ID: "42", Before: outbox.AggregateCursor{ID: "b"}},
		{ID: "42", Before: outbox.AggregateCursor{CreatedAt: at}},
		{ID: "42", Limit: -1},
		{ID: "42", Limit: 10001},
	} {
		_, err = b.store.AggregateEvents(t.Context(), q)
		require.ErrorIs(t, err, outbox.ErrInvalidRequest, "%+v", q)
	}
	require.Len(t, b.driver.aggCalls, 2, "an invalid query reaches no driver")
}

// A cursor's text reads back as the same cursor, to the nanosecond and
// whatever its event id holds; other text is refused.
func TestAggregateCursorText(t *testing.T) {
	t.Parallel()
	for _, c := range []outbox.AggregateCursor{
		{},
		{CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC), ID: "01JX0000000000000000000000"},
		{CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), ID: "a/b c?&<"},
	} {
		got, err := outbox.ParseAggregateCursor(c.String())
		require.NoError(t, err)
		require.Equal(t, c, got)
	}
	require.Equal(t, "2026-01-02T03:04:05.1Z/x", outbox.AggregateCursor{CreatedAt: time.Date(2026, 1, 2, 4, 4, 5, 100000000, time.FixedZone("", 3600)), ID: "x"}.String())
	for _, s := range []string{"x", "2026-01-02T03:04:05Z", "2026-01-02T03:04:05Z/", "yesterday/x"} {
		_, err := outbox.ParseAggregateCursor(s)
		require.ErrorIs(t, err, outbox.ErrInvalidRequest, s)
	}
}
