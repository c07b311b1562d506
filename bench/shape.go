package main

import "fmt"

// The one event shape every scenario writes, ours and the baselines': an
// OrderCreated event of an Order aggregate with a ≈300-byte JSON payload.
const (
	eventType     = "OrderCreated"
	aggregateType = "Order"
)

func aggregateID(i int) string { return fmt.Sprintf("order-%010d", i) }

// aggregateOf is the aggregate id of event i when the events come in
// aggregates of perAggregate each, written one after the other: events
// k·perAggregate to k·perAggregate+perAggregate-1 share the first one's id.
// With 0 or 1 every event is an aggregate of its own, aggregateID(i).
func aggregateOf(i, perAggregate int) string { return aggregateID(i - i%max(perAggregate, 1)) }

// payload is the JSON body of event i; every event's differs, as in real
// traffic, and all are the same length.
func payload(i int) []byte {
	return fmt.Appendf(nil, `{"orderId":%q,"customerId":"c-%010d",`+
		`"items":[{"sku":"SKU-000123","qty":2,"price":"19.99"},{"sku":"SKU-004567","qty":1,"price":"149.00"}],`+
		`"currency":"EUR","total":"188.98","shipping":{"method":"express","country":"DE"},"channel":"web","createdAt":"2026-11-22T05:00:00Z"}`,
		aggregateID(i), i%1_000_000)
}
