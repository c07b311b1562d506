package claimorder

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// Sort puts a claim's rows in due order and returns where the
// claim's cursor goes: after the last row in due order or, ordered, after
// the last aggregate in aggregate order (topic, aggregate type, rows
// without an aggregate id after those with one, then the key, byte by
// byte), whatever order the rows came in.
var start = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

func TestSort(t *testing.T) {
	t.Parallel()
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	row := func(id string, due int, topic, aggregateType, aggregateID string) outboxdriver.Row {
		return outboxdriver.Row{ID: id, Topic: topic, AggregateType: aggregateType, AggregateID: aggregateID, AvailableAt: at(due)}
	}
	position := func(r outboxdriver.Row) *outboxdriver.Position {
		p := &outboxdriver.Position{DueAt: r.AvailableAt, ID: r.ID, Topic: r.Topic, AggregateType: r.AggregateType, Key: r.AggregateID}
		if r.AggregateID == "" {
			p.Keyless, p.Key = true, r.ID
		}
		return p
	}
	var (
		a1 = row("01A", 1, "orders", "Order", "o-2")
		b1 = row("01B", 1, "orders", "Order", "o-1") // due with a1, after it by id
		c2 = row("01C", 2, "orders", "Order", "o-3")
		d0 = row("01D", 0, "orders", "Order", "o-1") // due first, written last
		k3 = row("01K", 3, "orders", "Order", "")    // keyless: after every key
		j3 = row("01J", 3, "orders", "Order", "")    // keyless, before k3 by id
		p4 = row("01P", 4, "orders", "Payment", "o-0")
		u5 = row("01U", 5, "orders", "Order", "Z-9") // upper case sorts first, byte by byte
		z0 = row("01Z", 0, "payments", "Order", "a")
	)
	tests := []struct {
		name             string
		rows             []outboxdriver.Row
		wantOrder        []string
		unordered, order *outboxdriver.Position
	}{
		{"no rows", nil, nil, nil, nil},
		{"one row", []outboxdriver.Row{a1}, []string{"01A"}, position(a1), position(a1)},
		{"due order, then id", []outboxdriver.Row{c2, b1, a1, d0}, []string{"01D", "01A", "01B", "01C"}, position(c2), position(c2)},
		{"the greatest key, not the last due", []outboxdriver.Row{a1, b1, c2, d0, u5}, []string{"01D", "01A", "01B", "01C", "01U"},
			position(u5), position(c2)},
		{"keyless after keyed", []outboxdriver.Row{c2, k3, a1}, []string{"01A", "01C", "01K"}, position(k3), position(k3)},
		{"keyless named by their ids", []outboxdriver.Row{k3, j3}, []string{"01J", "01K"}, position(k3), position(k3)},
		{"keyless after keyed, whatever their due times", []outboxdriver.Row{u5, j3, a1}, []string{"01A", "01J", "01U"},
			position(u5), position(j3)},
		{"aggregate type before key", []outboxdriver.Row{p4, k3, c2, u5}, []string{"01C", "01K", "01P", "01U"},
			position(u5), position(p4)},
		{"topic first", []outboxdriver.Row{p4, z0, k3}, []string{"01Z", "01K", "01P"}, position(p4), position(z0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, ordered := range []bool{false, true} {
				rows := append([]outboxdriver.Row(nil), tt.rows...)
				got := Sort(rows, ordered)
				var order []string
				for _, r := range rows {
					order = append(order, r.ID)
				}
				require.Equal(t, tt.wantOrder, order, "ordered=%v: the rows in due order", ordered)
				want := tt.unordered
				if ordered {
					want = tt.order
				}
				require.Equal(t, want, got, "ordered=%v: the position", ordered)
			}
		})
	}
}
