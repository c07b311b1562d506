package outbox

import "time"

// Metrics receives the relay's measurements: the specification's counters
// and gauges, the backlog, and delivery latency. Implementations must be
// safe for concurrent use and fast: they are called on the delivery path.
// [NopMetrics] discards everything; package prommetrics exports them to
// Prometheus.
type Metrics interface {
	// HotEnqueued counts an event queued for delivery right after commit.
	HotEnqueued(topic string)
	// HotDropped counts an event the hot path could not take (queue full,
	// topic not served here); it waits for the cold path.
	HotDropped(topic string)
	// ColdEnqueued counts n events claimed by the cold path.
	ColdEnqueued(topic string, n int)
	// Delivered records an acknowledged event and the time from when it
	// became due (its commit, or its DeliverAfter or retry time) to the
	// acknowledgement.
	Delivered(topic string, latency time.Duration)
	// Failed counts a failed delivery scheduled for another attempt
	// (RETRY or deferred).
	Failed(topic string)
	// Dead counts an event that went DEAD.
	Dead(topic string)
	// AddQueueDepths adds to the lengths of a topic's hot and cold queues
	// what a subscription's changed by since it last reported (negative
	// when they shrank), so that the subscriptions of one topic add up; a
	// subscription that stops takes back all it added.
	AddQueueDepths(topic string, hot, cold int)
	// Backlog records a topic's pending events (NEW and RETRY, due or
	// not) and how long the earliest due one has been due.
	Backlog(topic string, pending int64, oldest time.Duration)
}

// StoreErrorMetrics is a [Metrics] that also counts the relay's failed
// operations on the database, so that an outage or a stalled connection
// shows as a counter that rises, not only in the logs. The relay calls
// StoreError on a Metrics that implements it.
type StoreErrorMetrics interface {
	Metrics
	// StoreError counts a failed operation: "claim", "backlog" or
	// "release_earlier" (SubscriberConfig.ReleaseEarlierClaims) of a
	// topic's subscription, and, with topic "", "record" (a statement
	// recording outcomes or releasing claims, which the relay retries) and
	// "give_up" (outcomes or releases it gave up on: at Close, or refused
	// by the store as invalid; their events are delivered again when
	// their leases end).
	StoreError(topic, operation string)
}

// NopMetrics discards every measurement.
type NopMetrics struct{}

func (NopMetrics) HotEnqueued(string)                   {}
func (NopMetrics) HotDropped(string)                    {}
func (NopMetrics) ColdEnqueued(string, int)             {}
func (NopMetrics) Delivered(string, time.Duration)      {}
func (NopMetrics) Failed(string)                        {}
func (NopMetrics) Dead(string)                          {}
func (NopMetrics) AddQueueDepths(string, int, int)      {}
func (NopMetrics) Backlog(string, int64, time.Duration) {}
