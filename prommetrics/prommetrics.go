// Package prommetrics exports the outbox relay's measurements to
// Prometheus: an outbox.Metrics for SubscriberConfig.Metrics.
//
//	m, err := prommetrics.New(prometheus.DefaultRegisterer, prommetrics.Config{})
//	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{Metrics: m})
//
// Series, all labelled by topic (namespace "outbox" by default):
//
//	outbox_hot_enqueued_total          events queued right after commit
//	outbox_hot_dropped_total           events the hot path could not take (they wait for the cold path)
//	outbox_cold_enqueued_total         events claimed by the cold path
//	outbox_delivered_total             acknowledged events
//	outbox_failures_total              failed deliveries scheduled again (RETRY or deferred)
//	outbox_dead_total                  events that went DEAD
//	outbox_queue_depth{queue}          hot and cold queue lengths, summed over the subscriptions of the topic
//	outbox_pending_events              NEW and RETRY rows of the topic (alert when it does not fall)
//	outbox_oldest_pending_age_seconds  how long the earliest due pending row has been due (lag)
//	outbox_dead_events                 DEAD rows of the topic in the table (alert when it stays above 0)
//	outbox_unserved_events             pending rows of a topic no subscription of the relay serves (see outbox.Metrics.Unserved)
//	outbox_delivery_latency_seconds    due → acknowledgement histogram
//	outbox_handler_duration_seconds{outcome}  handler time histogram: message taken → "ack" or "nack"
//	outbox_store_errors_total{operation}  failed operations on the database (see outbox.Metrics.StoreError)
//
// and, with no topic label:
//
//	outbox_purged_rows_total{kind}     rows deleted by Store.Retain: "done", "dead" events, "processed" inbox records
//
// and, labelled by slot instead, for relays in log mode (see
// outbox.Metrics.LogSlot):
//
//	outbox_log_slot_lag_bytes               log the slot holds back, which the database cannot recycle
//	outbox_log_slot_confirmed_age_seconds   how long ago its reader last confirmed a position
//
// The names follow Prometheus's conventions, checked by its linter: the
// logistics plan's outbox_pending_count is outbox_pending_events here (a
// _count suffix belongs to histograms and summaries), and its
// outbox_failure_count is outbox_failures_total.
//
// Create one Metrics per process and give it to every subscriber: a second
// New on the same registerer fails, since its series exist already.
// Subscribers of different tables that serve a topic of the same name
// would overwrite each other's backlog gauges; give each its own Metrics,
// on a registerer that labels its series, such as
// prometheus.WrapRegistererWith(prometheus.Labels{"table": …}, reg).
//
// The queue depths are this process's. Pending count, age and DEAD count
// are the table's, measured by each subscriber of the topic every
// BacklogInterval (so aggregate them across instances with max, not sum);
// they hold the last measurement once no subscription of the topic runs
// here. While the backlog cannot be read, the counts hold and the age
// grows from the oldest pending event last seen. Topics this process does not subscribe
// to have no backlog series. The outcome counters count what this
// process's relays decided: a failure or a DEAD decided after another
// relay claimed the event again (the handler outlived its lease) is
// counted but not recorded.
//
// The counters of events (enqueued, dropped, delivered, failures, dead)
// of a topic exist, at 0, from its first backlog read on: increase() and
// rate() then see the first event a process counts, which a series born
// at 1 would hide from them (an alert on increase(outbox_dead_total[…])
// would miss the first DEAD event of a relay).
package prommetrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// Config configures [New].
type Config struct {
	// Namespace prefixes every series. Default "outbox".
	Namespace string
	// LatencyBuckets are the upper bounds in seconds, in increasing
	// order, of both histograms (delivery latency and handler duration).
	// Default: 0.5 ms to 60 s, roughly doubling.
	LatencyBuckets []float64
}

// Metrics is an outbox.Metrics backed by Prometheus collectors. It is safe
// for concurrent use.
type Metrics struct {
	hotEnqueued, hotDropped, coldEnqueued *prometheus.CounterVec
	delivered, failures, dead             *prometheus.CounterVec
	storeErrors                           *prometheus.CounterVec
	queueDepth, pending, oldestAge        *prometheus.GaugeVec
	deadEvents, unserved                  *prometheus.GaugeVec
	latency, handled                      *prometheus.HistogramVec
	purged                                *prometheus.CounterVec
	slotLag, slotConfirmedAge             *prometheus.GaugeVec
}

var _ outbox.Metrics = (*Metrics)(nil)

// New creates the collectors and registers them with reg. It fails with
// outbox.ErrInvalidRequest for a nil reg or buckets out of order, and with
// the registry's error when a collector cannot be registered (a series of
// the same name exists); a failed New leaves nothing registered.
func New(reg prometheus.Registerer, cfg Config) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: prommetrics needs a registerer", outbox.ErrInvalidRequest)
	}
	ns := cfg.Namespace
	if ns == "" {
		ns = "outbox"
	}
	buckets := cfg.LatencyBuckets
	if len(buckets) == 0 {
		buckets = []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	}
	for i := 1; i < len(buckets); i++ {
		// Prometheus checks them only when the first latency is observed,
		// on the delivery path, by panicking.
		if !(buckets[i-1] < buckets[i]) {
			return nil, fmt.Errorf("%w: prommetrics: LatencyBuckets %v are not in increasing order",
				outbox.ErrInvalidRequest, buckets)
		}
	}
	topic := []string{"topic"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, topic)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, append(topic, labels...))
	}
	m := &Metrics{
		hotEnqueued:  counter("hot_enqueued_total", "Events queued for delivery right after commit."),
		hotDropped:   counter("hot_dropped_total", "Events the hot path could not take; they wait for the cold path."),
		coldEnqueued: counter("cold_enqueued_total", "Events claimed by the cold path."),
		delivered:    counter("delivered_total", "Acknowledged events."),
		failures:     counter("failures_total", "Failed deliveries scheduled for another attempt."),
		dead:         counter("dead_total", "Events that went DEAD."),
		queueDepth:   gauge("queue_depth", "Events waiting in the queues of the topic's subscriptions.", "queue"),
		pending:      gauge("pending_events", "NEW and RETRY events of the topic."),
		oldestAge:    gauge("oldest_pending_age_seconds", "How long the earliest due pending event of the topic has been due."),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "store_errors_total", Help: "Failed operations of the relay on the database: claim, backlog, record (outcomes and releases, retried) and give_up.",
		}, append(topic, "operation")),
		deadEvents: gauge("dead_events", "DEAD events of the topic."),
		unserved:   gauge("unserved_events", "Pending events of a topic that no subscription of the relay serves."),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "delivery_latency_seconds", Help: "Time from an event being due (its commit, unless scheduled or retried) to its acknowledgement.", Buckets: buckets,
		}, topic),
		handled: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "handler_duration_seconds", Help: "Time from an event's message being handed to the handler to its ack or nack (outcome).", Buckets: buckets,
		}, append(topic, "outcome")),
		purged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "purged_rows_total", Help: "Rows deleted by the retention job (Store.Retain), by kind: done, dead, processed.",
		}, []string{"kind"}),
		slotLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "log_slot_lag_bytes", Help: "Log a log slot holds back, from its confirmed position to the database's current one.",
		}, []string{"slot"}),
		slotConfirmedAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "log_slot_confirmed_age_seconds", Help: "How long ago a reader last confirmed a position in a log slot; 0 when none of this module did.",
		}, []string{"slot"}),
	}
	collectors := []prometheus.Collector{m.hotEnqueued, m.hotDropped, m.coldEnqueued, m.delivered,
		m.failures, m.dead, m.storeErrors, m.queueDepth, m.pending, m.oldestAge, m.deadEvents, m.unserved, m.latency, m.handled, m.purged,
		m.slotLag, m.slotConfirmedAge}
	for i, c := range collectors {
		if err := reg.Register(c); err != nil {
			for _, registered := range collectors[:i] {
				reg.Unregister(registered)
			}
			return nil, fmt.Errorf("prommetrics: register: %w", err)
		}
	}
	return m, nil
}

// HotEnqueued implements [outbox.Metrics]: outbox_hot_enqueued_total.
func (m *Metrics) HotEnqueued(topic string) { m.hotEnqueued.WithLabelValues(topic).Inc() }

// HotDropped implements [outbox.Metrics]: outbox_hot_dropped_total.
func (m *Metrics) HotDropped(topic string) { m.hotDropped.WithLabelValues(topic).Inc() }

// ColdEnqueued implements [outbox.Metrics]: outbox_cold_enqueued_total.
func (m *Metrics) ColdEnqueued(topic string, n int) {
	m.coldEnqueued.WithLabelValues(topic).Add(float64(n))
}

// Delivered implements [outbox.Metrics]: outbox_delivered_total and the
// outbox_delivery_latency_seconds histogram.
func (m *Metrics) Delivered(topic string, latency time.Duration) {
	m.delivered.WithLabelValues(topic).Inc()
	m.latency.WithLabelValues(topic).Observe(latency.Seconds())
}

// Failed implements [outbox.Metrics]: outbox_failures_total.
func (m *Metrics) Failed(topic string) { m.failures.WithLabelValues(topic).Inc() }

// Dead implements [outbox.Metrics]: outbox_dead_total.
func (m *Metrics) Dead(topic string) { m.dead.WithLabelValues(topic).Inc() }

// AddQueueDepths implements [outbox.Metrics]: outbox_queue_depth, with
// queue "hot" and "cold".
func (m *Metrics) AddQueueDepths(topic string, hot, cold int) {
	m.queueDepth.WithLabelValues(topic, "hot").Add(float64(hot))
	m.queueDepth.WithLabelValues(topic, "cold").Add(float64(cold))
}

// StoreError implements [outbox.StoreErrorMetrics]:
// outbox_store_errors_total.
func (m *Metrics) StoreError(topic, operation string) {
	m.storeErrors.WithLabelValues(topic, operation).Inc()
}

// Backlog implements [outbox.Metrics]: outbox_pending_events and
// outbox_oldest_pending_age_seconds. The topic's counters of events start
// at 0 with it, unless they exist already (see the package doc).
func (m *Metrics) Backlog(topic string, pending int64, oldest time.Duration) {
	m.pending.WithLabelValues(topic).Set(float64(pending))
	m.oldestAge.WithLabelValues(topic).Set(oldest.Seconds())
	for _, c := range []*prometheus.CounterVec{m.hotEnqueued, m.hotDropped, m.coldEnqueued, m.delivered, m.failures, m.dead} {
		c.WithLabelValues(topic)
	}
}

// DeadEvents implements [outbox.Metrics]: outbox_dead_events.
func (m *Metrics) DeadEvents(topic string, n int64) {
	m.deadEvents.WithLabelValues(topic).Set(float64(n))
}

// Handled implements [outbox.Metrics]: the
// outbox_handler_duration_seconds histogram, with outcome "ack" or
// "nack".
func (m *Metrics) Handled(topic string, ack bool, d time.Duration) {
	outcome := "nack"
	if ack {
		outcome = "ack"
	}
	m.handled.WithLabelValues(topic, outcome).Observe(d.Seconds())
}

// Unserved implements [outbox.Metrics]: outbox_unserved_events.
func (m *Metrics) Unserved(topic string, pending int64) {
	m.unserved.WithLabelValues(topic).Set(float64(pending))
}

// Purged implements [outbox.Metrics]: outbox_purged_rows_total, by kind.
func (m *Metrics) Purged(kind string, rows int64) {
	m.purged.WithLabelValues(kind).Add(float64(rows))
}

// LogSlot implements [outbox.Metrics]: outbox_log_slot_lag_bytes and
// outbox_log_slot_confirmed_age_seconds.
func (m *Metrics) LogSlot(slot string, lagBytes int64, confirmedAge time.Duration) {
	m.slotLag.WithLabelValues(slot).Set(float64(lagBytes))
	m.slotConfirmedAge.WithLabelValues(slot).Set(confirmedAge.Seconds())
}
