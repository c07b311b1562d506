package outboxtest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// pageSize is how many events one query of Written reads.
const pageSize = 1000

// Written returns every event in store's table, of every status, ordered
// by event id: what was committed, whether a relay has delivered it yet
// or not. A transaction still open, or rolled back, wrote nothing. It
// fails the test if the table cannot be read.
func Written[Tx any](t testing.TB, store *outbox.Store[Tx]) []outbox.Event {
	t.Helper()
	var all []outbox.Event
	q := outbox.EventQuery{Limit: pageSize}
	for {
		page, err := store.QueryEvents(t.Context(), q)
		if err != nil {
			t.Fatalf("outboxtest: read the written events: %v", err)
			return nil
		}
		all = append(all, page...)
		if len(page) < pageSize {
			return all
		}
		q.After = page[len(page)-1].ID
	}
}

// RequireWritten fails the test unless exactly one event in store's table
// matches want, and returns that event. The failure message lists the
// events of the table and why each does not match. To check only what a
// piece of code wrote, in a table that holds other events, use [Mark].
func RequireWritten[Tx any](t testing.TB, store *outbox.Store[Tx], want Want) outbox.Event {
	t.Helper()
	return requireWritten(t, Written(t, store), want, "")
}

// RequireNotWritten fails the test if an event in store's table matches
// want, and lists those that do.
func RequireNotWritten[Tx any](t testing.TB, store *outbox.Store[Tx], want Want) {
	t.Helper()
	requireNotWritten(t, Written(t, store), want, "")
}

// Marker is the state of a store's table at a point of a test, from which
// it tells the events written since. Make one with [Mark].
type Marker[Tx any] struct {
	store  *outbox.Store[Tx]
	before map[string]struct{}
}

// Mark notes the events in store's table now, so that the Marker's
// methods see only those written after:
//
//	mark := outboxtest.Mark(t, store)
//	placeOrder(ctx, ...)
//	mark.RequireWritten(t, outboxtest.Want{Type: "OrderPlaced", AggregateID: "o-1"})
//
// It reads the ids of the whole table: keep the tables of tests small (a
// database per test, or one emptied between tests).
func Mark[Tx any](t testing.TB, store *outbox.Store[Tx]) *Marker[Tx] {
	t.Helper()
	m := &Marker[Tx]{store: store, before: make(map[string]struct{})}
	for _, e := range Written(t, store) {
		m.before[e.ID] = struct{}{}
	}
	return m
}

// Written returns the events written since the mark, of every status,
// ordered by event id.
func (m *Marker[Tx]) Written(t testing.TB) []outbox.Event {
	t.Helper()
	var since []outbox.Event
	for _, e := range Written(t, m.store) {
		if _, ok := m.before[e.ID]; !ok {
			since = append(since, e)
		}
	}
	return since
}

// RequireWritten is [RequireWritten] on the events written since the
// mark.
func (m *Marker[Tx]) RequireWritten(t testing.TB, want Want) outbox.Event {
	t.Helper()
	return requireWritten(t, m.Written(t), want, " since the mark")
}

// RequireNotWritten is [RequireNotWritten] on the events written since
// the mark.
func (m *Marker[Tx]) RequireNotWritten(t testing.TB, want Want) {
	t.Helper()
	requireNotWritten(t, m.Written(t), want, " since the mark")
}

func requireWritten(t testing.TB, written []outbox.Event, want Want, since string) outbox.Event {
	t.Helper()
	c, err := want.compile()
	if err != nil {
		t.Fatalf("%v", err)
		return outbox.Event{}
	}
	var matched []outbox.Event
	for i := range written {
		if c.mismatch(&written[i]) == "" {
			matched = append(matched, written[i])
		}
	}
	switch len(matched) {
	case 1:
		return matched[0]
	case 0:
		t.Fatalf("outboxtest: no event written%s matches %s; %s", since, want, list(written, c, since))
	default:
		t.Fatalf("outboxtest: %d events written%s match %s, want exactly one (narrow the Want); %s",
			len(matched), since, want, list(matched, nil, since))
	}
	return outbox.Event{}
}

func requireNotWritten(t testing.TB, written []outbox.Event, want Want, since string) {
	t.Helper()
	c, err := want.compile()
	if err != nil {
		t.Fatalf("%v", err)
		return
	}
	var matched []outbox.Event
	for i := range written {
		if c.mismatch(&written[i]) == "" {
			matched = append(matched, written[i])
		}
	}
	if len(matched) > 0 {
		t.Fatalf("outboxtest: %d events written%s match %s, want none; %s", len(matched), since, want, list(matched, nil, since))
	}
}

// list describes events for a failure message, one a line, with why each
// does not match c when c is set.
func list(events []outbox.Event, c *compiled, since string) string {
	if len(events) == 0 {
		return "no event was written" + since
	}
	var b strings.Builder
	if c != nil {
		fmt.Fprintf(&b, "the events written%s:", since)
	} else {
		b.WriteString("they are:")
	}
	for i := range events {
		e := &events[i]
		fmt.Fprintf(&b, "\n  %s topic=%q aggregate=%s/%q", e.Type, e.Topic, e.AggregateType, e.AggregateID)
		if e.TenantID != "" {
			fmt.Fprintf(&b, " tenant=%q", e.TenantID)
		}
		fmt.Fprintf(&b, " %s id=%s payload=%s", e.Status, e.ID, excerpt(e.Payload()))
		if c != nil {
			fmt.Fprintf(&b, "\n    (%s)", c.mismatch(e))
		}
	}
	return b.String()
}
