package outboxotel

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// MetricsConfig configures [NewMetrics].
type MetricsConfig struct {
	// MeterProvider makes the instruments. Default:
	// otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Namespace prefixes every instrument's name. Default "outbox".
	Namespace string
	// LatencyBuckets are the explicit bucket boundaries in seconds, in
	// increasing order, of both histograms (delivery latency and handler
	// duration). Default: those of package prommetrics, 0.5 ms to 60 s,
	// roughly doubling.
	LatencyBuckets []float64
}

// defaultBuckets are prommetrics' default buckets.
var defaultBuckets = []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Metrics is an outbox.Metrics on the OpenTelemetry metric API, for
// watermilladapter.SubscriberConfig.Metrics (and outbox's retention): the
// series of package prommetrics, under names that an OpenTelemetry
// Prometheus exporter turns back into prommetrics' (see the package
// documentation for the table). It is safe for concurrent use.
type Metrics struct {
	hotEnqueued, hotDropped, coldEnqueued metric.Int64Counter
	delivered, failures, dead             metric.Int64Counter
	storeErrors, purged                   metric.Int64Counter
	queueDepth                            metric.Int64UpDownCounter
	pending, deadEvents, unserved         metric.Int64Gauge
	oldestAge, slotConfirmedAge           metric.Float64Gauge
	slotLag                               metric.Int64Gauge
	latency, handled                      metric.Float64Histogram

	topics sync.Map // topic → metric.MeasurementOption of its attribute set
}

var _ outbox.Metrics = (*Metrics)(nil)

// NewMetrics creates the instruments. It fails with
// outbox.ErrInvalidRequest for buckets out of order, and with the meter's
// error when an instrument cannot be created.
func NewMetrics(cfg MetricsConfig) (*Metrics, error) {
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	ns := cfg.Namespace
	if ns == "" {
		ns = "outbox"
	}
	buckets := cfg.LatencyBuckets
	if len(buckets) == 0 {
		buckets = defaultBuckets
	}
	for i := 1; i < len(buckets); i++ {
		if !(buckets[i-1] < buckets[i]) {
			return nil, fmt.Errorf("%w: outboxotel: LatencyBuckets %v are not in increasing order", outbox.ErrInvalidRequest, buckets)
		}
	}
	meter := mp.Meter(ScopeName)
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(ns+"."+name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	intGauge := func(name, desc string) metric.Int64Gauge {
		g, err := meter.Int64Gauge(ns+"."+name, metric.WithUnit("{event}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(ns+"."+name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	m := &Metrics{
		hotEnqueued:  counter("hot_enqueued", "{event}", "Events queued for delivery right after commit."),
		hotDropped:   counter("hot_dropped", "{event}", "Events the hot path could not take; they wait for the cold path."),
		coldEnqueued: counter("cold_enqueued", "{event}", "Events claimed by the cold path."),
		delivered:    counter("delivered", "{event}", "Acknowledged events."),
		failures:     counter("failures", "{event}", "Failed deliveries scheduled for another attempt."),
		dead:         counter("dead", "{event}", "Events that went DEAD."),
		storeErrors: counter("store_errors", "{error}",
			"Failed operations of the relay on the database: claim, backlog, record (outcomes and releases, retried) and give_up."),
		purged:     counter("purged_rows", "{row}", "Rows deleted by the retention job (Store.Retain), by kind: done, dead, processed."),
		pending:    intGauge("pending_events", "NEW and RETRY events of the topic."),
		deadEvents: intGauge("dead_events", "DEAD events of the topic."),
		unserved:   intGauge("unserved_events", "Pending events of a topic no subscription of the relay serves."),
		latency:    histogram("delivery_latency", "Time from an event being due (its commit, unless scheduled or retried) to its acknowledgement."),
		handled:    histogram("handler_duration", "Time from an event's message being handed to the handler to its ack or nack (outcome)."),
	}
	var err error
	m.queueDepth, err = meter.Int64UpDownCounter(ns+".queue_depth", metric.WithUnit("{event}"),
		metric.WithDescription("Events waiting in the queues of the topic's subscriptions."))
	errs = append(errs, err)
	m.oldestAge, err = meter.Float64Gauge(ns+".oldest_pending_age", metric.WithUnit("s"),
		metric.WithDescription("How long the earliest due pending event of the topic has been due."))
	errs = append(errs, err)
	m.slotLag, err = meter.Int64Gauge(ns+".log_slot_lag", metric.WithUnit("By"),
		metric.WithDescription("Log a log slot holds back, from its confirmed position to the database's current one."))
	errs = append(errs, err)
	m.slotConfirmedAge, err = meter.Float64Gauge(ns+".log_slot_confirmed_age", metric.WithUnit("s"),
		metric.WithDescription("How long ago a reader last confirmed a position in a log slot; 0 when none of this module did."))
	errs = append(errs, err)
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("outboxotel: create instrument: %w", err)
		}
	}
	return m, nil
}

// topic returns the measurement option of topic's attribute set, made
// once per topic.
func (m *Metrics) topic(topic string) metric.MeasurementOption {
	if o, ok := m.topics.Load(topic); ok {
		return o.(metric.MeasurementOption)
	}
	o, _ := m.topics.LoadOrStore(topic, metric.WithAttributeSet(attribute.NewSet(attribute.String("topic", topic))))
	return o.(metric.MeasurementOption)
}

func with(kvs ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(kvs...))
}

// The relay calls Metrics with no context; measurements need one only for
// exemplars, which these have none of.
var bg = context.Background()

// HotEnqueued implements [outbox.Metrics]: outbox.hot_enqueued.
func (m *Metrics) HotEnqueued(topic string) { m.hotEnqueued.Add(bg, 1, m.topic(topic)) }

// HotDropped implements [outbox.Metrics]: outbox.hot_dropped.
func (m *Metrics) HotDropped(topic string) { m.hotDropped.Add(bg, 1, m.topic(topic)) }

// ColdEnqueued implements [outbox.Metrics]: outbox.cold_enqueued.
func (m *Metrics) ColdEnqueued(topic string, n int) {
	m.coldEnqueued.Add(bg, int64(n), m.topic(topic))
}

// Delivered implements [outbox.Metrics]: outbox.delivered and the
// outbox.delivery_latency histogram.
func (m *Metrics) Delivered(topic string, latency time.Duration) {
	o := m.topic(topic)
	m.delivered.Add(bg, 1, o)
	m.latency.Record(bg, latency.Seconds(), o)
}

// Failed implements [outbox.Metrics]: outbox.failures.
func (m *Metrics) Failed(topic string) { m.failures.Add(bg, 1, m.topic(topic)) }

// Dead implements [outbox.Metrics]: outbox.dead.
func (m *Metrics) Dead(topic string) { m.dead.Add(bg, 1, m.topic(topic)) }

// AddQueueDepths implements [outbox.Metrics]: outbox.queue_depth, with
// queue "hot" and "cold".
func (m *Metrics) AddQueueDepths(topic string, hot, cold int) {
	m.queueDepth.Add(bg, int64(hot), with(attribute.String("topic", topic), attribute.String("queue", "hot")))
	m.queueDepth.Add(bg, int64(cold), with(attribute.String("topic", topic), attribute.String("queue", "cold")))
}

// Backlog implements [outbox.Metrics]: outbox.pending_events and
// outbox.oldest_pending_age. The topic's counters of events start at 0
// with it, as prommetrics' do, so that a rate sees the first event.
func (m *Metrics) Backlog(topic string, pending int64, oldest time.Duration) {
	o := m.topic(topic)
	m.pending.Record(bg, pending, o)
	m.oldestAge.Record(bg, oldest.Seconds(), o)
	for _, c := range []metric.Int64Counter{m.hotEnqueued, m.hotDropped, m.coldEnqueued, m.delivered, m.failures, m.dead} {
		c.Add(bg, 0, o)
	}
}

// StoreError implements [outbox.Metrics]: outbox.store_errors, by
// operation.
func (m *Metrics) StoreError(topic, operation string) {
	m.storeErrors.Add(bg, 1, with(attribute.String("topic", topic), attribute.String("operation", operation)))
}

// DeadEvents implements [outbox.Metrics]: outbox.dead_events.
func (m *Metrics) DeadEvents(topic string, n int64) { m.deadEvents.Record(bg, n, m.topic(topic)) }

// Handled implements [outbox.Metrics]: the outbox.handler_duration
// histogram, with outcome "ack" or "nack".
func (m *Metrics) Handled(topic string, ack bool, d time.Duration) {
	outcome := "nack"
	if ack {
		outcome = "ack"
	}
	m.handled.Record(bg, d.Seconds(), with(attribute.String("topic", topic), attribute.String("outcome", outcome)))
}

// Unserved implements [outbox.Metrics]: outbox.unserved_events.
func (m *Metrics) Unserved(topic string, pending int64) {
	m.unserved.Record(bg, pending, m.topic(topic))
}

// Purged implements [outbox.Metrics]: outbox.purged_rows, by kind.
func (m *Metrics) Purged(kind string, rows int64) {
	m.purged.Add(bg, rows, with(attribute.String("kind", kind)))
}

// LogSlot implements [outbox.Metrics]: outbox.log_slot_lag and
// outbox.log_slot_confirmed_age, by slot.
func (m *Metrics) LogSlot(slot string, lagBytes int64, confirmedAge time.Duration) {
	o := with(attribute.String("slot", slot))
	m.slotLag.Record(bg, lagBytes, o)
	m.slotConfirmedAge.Record(bg, confirmedAge.Seconds(), o)
}
