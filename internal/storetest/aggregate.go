package storetest

import (
	"cmp"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// AggregateEvents pages through one aggregate's events of every status,
// newest first, events written at the same time by event id (not in the
// order they were written), with pages that split them; other
// aggregates, aggregate types, topics and events without an aggregate
// stay out.
func testAggregateEvents[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	mk := func(id, topic string, aggType outbox.AggregateType, aggID string) outbox.Envelope {
		return outbox.Envelope{ID: id, Type: "T", Topic: topic, AggregateType: aggType, AggregateID: aggID, PayloadJSON: []byte(`{}`)}
	}
	f.write(t, mk("e-01", "a", "Order", "42"), mk("x-01", "a", "Order", "43"), mk("x-02", "a", "Invoice", "42"),
		mk("x-03", "a", "", "42"), mk("x-04", "a", "Order", ""))
	f.Clock.Advance(time.Second)
	f.write(t, mk("e-04", "b", "Order", "42"), mk("e-02", "b", "Order", "42"), mk("e-06", "a", "Order", "42"),
		mk("e-03", "a", "Order", "42"), mk("e-05", "b", "Order", "42"))
	f.Clock.Advance(time.Second)
	f.write(t, mk("e-07", "b", "Order", "42"))
	require.EqualValues(t, 1, f.markDone(t, "e-01"))
	require.EqualValues(t, 2, f.record(t, "", dead("e-03", "dead"), retry("e-05", Start.Add(time.Hour), "later")))

	query := func(q outbox.AggregateQuery) []string {
		t.Helper()
		var ids []string
		for {
			page, err := f.Store.AggregateEvents(ctx, q)
			require.NoError(t, err)
			require.LessOrEqual(t, len(page.Events), cmp.Or(q.Limit, 100))
			for _, e := range page.Events {
				require.Equal(t, f.get(t, e.ID), e, "a query reads rows as Get does")
			}
			ids = append(ids, IDs(page.Events)...)
			if page.Next.IsZero() {
				return nilIfEmpty(ids)
			}
			require.NotEmpty(t, page.Events)
			last := page.Events[len(page.Events)-1]
			require.Equal(t, outbox.AggregateCursor{CreatedAt: last.CreatedAt, ID: last.ID}, page.Next)
			q.Before = page.Next
		}
	}
	all := []string{"e-07", "e-06", "e-05", "e-04", "e-03", "e-02", "e-01"}
	for _, limit := range []int{0, 1, 2, 3, 7} {
		require.Equal(t, all, query(outbox.AggregateQuery{Type: "Order", ID: "42", Limit: limit}), "limit %d", limit)
	}
	require.Equal(t, []string{"e-07", "e-05", "e-04", "e-02"}, query(outbox.AggregateQuery{Type: "Order", ID: "42", Topic: "b", Limit: 2}))
	require.Equal(t, []string{"e-06", "e-03", "e-01"}, query(outbox.AggregateQuery{Type: "Order", ID: "42", Topic: "a", Limit: 1}))
	require.Equal(t, []string{"x-03"}, query(outbox.AggregateQuery{ID: "42"}), "no type is the global aggregate")
	require.Equal(t, []string{"x-02"}, query(outbox.AggregateQuery{Type: "Invoice", ID: "42"}))
	require.Nil(t, query(outbox.AggregateQuery{Type: "Order", ID: "44"}))
	require.Nil(t, query(outbox.AggregateQuery{Type: "Order", ID: "42", Topic: "c"}))

	// A cursor in the middle of the events written at the same time, as
	// its text form carries it, starts after it.
	page, err := f.Store.AggregateEvents(ctx, outbox.AggregateQuery{Type: "Order", ID: "42", Limit: 3})
	require.NoError(t, err)
	require.Equal(t, all[:3], IDs(page.Events))
	cursor, err := outbox.ParseAggregateCursor(page.Next.String())
	require.NoError(t, err)
	page, err = f.Store.AggregateEvents(ctx, outbox.AggregateQuery{Type: "Order", ID: "42", Before: cursor, Limit: 3})
	require.NoError(t, err)
	require.Equal(t, all[3:6], IDs(page.Events))
	statuses := make([]outbox.Status, len(page.Events))
	for i, e := range page.Events {
		statuses[i] = e.Status
	}
	require.Equal(t, []outbox.Status{outbox.StatusNew, outbox.StatusDead, outbox.StatusNew}, statuses)

	_, err = f.Store.AggregateEvents(ctx, outbox.AggregateQuery{Type: "Order"})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
}

// PlanAggregate is the aggregate id of type "Order" that the dialects'
// tests of the aggregate query's plan read.
const PlanAggregate = "o-2"

// AggregatePlanEvents are n events of topic "orders" and aggregate type
// "Order" for those tests: every other one of PlanAggregate, a page's
// worth many times over; one in three of the others spread over ten
// other aggregates; the rest without an aggregate id.
func AggregatePlanEvents(n int) []outbox.Envelope {
	events := make([]outbox.Envelope, n)
	for i := range events {
		e := JSONEvent(i)
		e.Topic, e.AggregateType = "orders", "Order"
		switch {
		case i%2 == 0:
			e.AggregateID = PlanAggregate
		case i%3 == 0:
			e.AggregateID = fmt.Sprintf("o-%d", i%20)
		}
		events[i] = e
	}
	return events
}
