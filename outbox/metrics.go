package outbox

import "time"

// Metrics receives the relay's measurements: counters and gauges of the
// hot and cold paths, the backlog, delivery latency, and failed database
// operations. Implementations must be safe for concurrent use and fast:
// they are called on the delivery path. Package prommetrics exports them
// to Prometheus; a nil Metrics discards them.
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
	// StoreError counts a failed operation on the database, so that an
	// outage or a stalled connection shows as a counter that rises, not
	// only in the logs: "claim", "backlog", "release_earlier" or
	// "unfinished" (an ordered relay in log mode looking up the earlier
	// events of streamed aggregates, or leasing one to take a parked
	// aggregate back) of a topic's subscription, and, with
	// topic "", "record" (a statement
	// recording outcomes or releasing claims, which the relay retries),
	// "give_up" (outcomes or releases it gave up on at Close; their events
	// are delivered again when their leases end), "heartbeat" (a relay's
	// heartbeat), "release_dead" (the release of dead relays' claims),
	// "log_slots" (the read of the log slots, see LogSlot), "feed" (a log
	// feed that cannot stream), and
	// "retention" (a failed step of a [Store.Retain] round).
	StoreError(topic, operation string)
	// DeadEvents records how many DEAD events of a topic the table holds,
	// read with the backlog every BacklogInterval (a failed read counts
	// as StoreError(topic, "count_dead"); the last count is reported
	// again while the database cannot be reached).
	DeadEvents(topic string, n int64)
	// Handled records how long a handler took with an event: from the
	// message being taken from the subscription's channel to its Ack
	// (ack true) or Nack. A message abandoned at Close is not recorded.
	Handled(topic string, ack bool, d time.Duration)
	// Purged counts the rows a round of [Store.Retain] deleted, by kind:
	// "done" and "dead" events, "processed" inbox records; 0 for a kind it
	// ran and found nothing to delete.
	Purged(kind string, rows int64)
	// Unserved records the pending events (NEW and RETRY) of a topic that
	// no subscription of the reporting relay serves, read every
	// BacklogInterval from the whole table: events nobody in this process
	// will deliver. 0 once the topic is served or has no pending event.
	// Alert when it stays above 0 on every relay: no listener takes them.
	Unserved(topic string, pending int64)
	// LogSlot records a log slot of the database that a relay in log
	// mode reads, every BacklogInterval: the log it holds back, in bytes,
	// and how long ago a reader last confirmed a position in it (0 when
	// no relay of the table ever did: another tool's slot). A slot that
	// is gone is reported once more with 0 and 0. A slot nobody reads
	// holds the log for ever: alert when either grows.
	LogSlot(slot string, lagBytes int64, confirmedAge time.Duration)
}
