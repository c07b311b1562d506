// Package claimorder holds the orders claims go in, which the relay
// (watermilladapter) keeps its claim cursor by and the conformance suite
// (internal/storetest) checks drivers against: due order (available_at,
// then event id) and, for ordered claims, aggregate order (topic,
// aggregate type, rows without an aggregate id after those with one, then
// aggregate id or, without one, event id), byte by byte.
package claimorder

import (
	"cmp"
	"slices"
	"strings"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// Sort puts rows in due order, the order of the due index, which a
// claim's rows usually come back in already, and returns the position of
// the last row a claim went through: the last in due order or, ordered,
// in aggregate order. It returns nil for no rows.
func Sort(rows []outboxdriver.Row, ordered bool) *outboxdriver.Position {
	if len(rows) == 0 {
		return nil
	}
	slices.SortFunc(rows, compareDue)
	last := &rows[len(rows)-1]
	if ordered {
		last = &rows[0]
		for i := range rows {
			if compareAggregates(&rows[i], last) > 0 {
				last = &rows[i]
			}
		}
	}
	keyless, key := aggregateKey(last)
	return &outboxdriver.Position{DueAt: last.AvailableAt, ID: last.ID,
		Topic: last.Topic, AggregateType: last.AggregateType, Keyless: keyless, Key: key}
}

// compareDue orders rows by due time (available_at), then id.
func compareDue(a, b outboxdriver.Row) int {
	return cmp.Or(a.AvailableAt.Compare(b.AvailableAt), strings.Compare(a.ID, b.ID))
}

// compareAggregates orders rows as ordered claims go through their
// aggregates: by topic, aggregate type, then aggregate id, byte by byte,
// a row without an aggregate id coming after those with one, as an
// aggregate of its own named by its id.
func compareAggregates(a, b *outboxdriver.Row) int {
	aKeyless, aKey := aggregateKey(a)
	bKeyless, bKey := aggregateKey(b)
	return cmp.Or(strings.Compare(a.Topic, b.Topic), strings.Compare(a.AggregateType, b.AggregateType),
		compareBool(aKeyless, bKeyless), strings.Compare(aKey, bKey))
}

// aggregateKey is how ordered claims name r's aggregate within its topic
// and aggregate type: by its aggregate id, or, when it has none (keyless),
// by its own id.
func aggregateKey(r *outboxdriver.Row) (keyless bool, key string) {
	if r.AggregateID == "" {
		return true, r.ID
	}
	return false, r.AggregateID
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
