package main

import "fmt"

// The one event shape every scenario writes, ours and the baselines': an
// OrderCreated event of an Order aggregate with a ≈300-byte JSON payload.
const (
	eventType     = "OrderCreated"
	aggregateType = "Order"
)

func aggregateID(i int) string { return fmt.Sprintf("order-%010d", i) }

// shape is how a backlog's events fall into aggregates: in aggregates of
// perAggregate events written one after the other (0 or 1: every event its
// own), or, with hot above 0, event i in aggregate i mod hot: a few busy
// aggregates whose events interleave, as the traffic of hot keys does.
type shape struct{ perAggregate, hot int }

// eachOwn is the shape in which every event is an aggregate of its own.
var eachOwn = shape{}

// index is the number of event i's aggregate, from 0.
func (s shape) index(i int) int {
	if s.hot > 0 {
		return i % s.hot
	}
	return i / max(s.perAggregate, 1)
}

// aggregates is how many aggregates n events make.
func (s shape) aggregates(n int) int {
	if s.hot > 0 {
		return min(s.hot, n)
	}
	per := max(s.perAggregate, 1)
	return (n + per - 1) / per
}

// aggregateOf is the aggregate id of event i: in aggregates written one
// after the other, events k·perAggregate to k·perAggregate+perAggregate-1
// share the first one's id; with every event its own, aggregateID(i);
// with hot aggregates, aggregateID(i mod hot).
func (s shape) aggregateOf(i int) string {
	if s.hot > 0 {
		return aggregateID(i % s.hot)
	}
	return aggregateID(i - i%max(s.perAggregate, 1))
}

func (s shape) String() string {
	switch {
	case s.hot == 1:
		return "1 aggregate"
	case s.hot > 1:
		return fmt.Sprintf("%d aggregates, events interleaved", s.hot)
	case s.perAggregate > 1:
		return fmt.Sprintf("aggregates of %d events", s.perAggregate)
	}
	return "every event its own aggregate"
}

// payload is the JSON body of event i; every event's differs, as in real
// traffic, and all are the same length.
func payload(i int) []byte {
	return fmt.Appendf(nil, `{"orderId":%q,"customerId":"c-%010d",`+
		`"items":[{"sku":"SKU-000123","qty":2,"price":"19.99"},{"sku":"SKU-004567","qty":1,"price":"149.00"}],`+
		`"currency":"EUR","total":"188.98","shipping":{"method":"express","country":"DE"},"channel":"web","createdAt":"2026-11-22T05:00:00Z"}`,
		aggregateID(i), i%1_000_000)
}
