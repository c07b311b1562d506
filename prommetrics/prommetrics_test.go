package prommetrics_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/prommetrics"
)

func TestSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m, err := prommetrics.New(reg, prommetrics.Config{})
	require.NoError(t, err)
	m.HotEnqueued("orders")
	m.HotEnqueued("orders")
	m.HotDropped("orders")
	m.ColdEnqueued("orders", 50)
	m.Delivered("orders", 3*time.Millisecond)
	m.Failed("orders")
	m.Dead("payments")
	m.AddQueueDepths("orders", 7, 9)
	m.AddQueueDepths("orders", 2, 3)
	m.AddQueueDepths("orders", -2, -3)
	m.Backlog("orders", 1234, 90*time.Second)
	m.StoreError("orders", "claim")
	m.StoreError("orders", "claim")
	m.StoreError("", "record")
	m.DeadEvents("payments", 4)
	m.DeadEvents("payments", 3) // replayed one: a gauge, not a counter
	m.Handled("orders", true, 2*time.Millisecond)
	m.Unserved("lost", 12)
	m.Unserved("found", 3)
	m.Unserved("found", 0) // served now
	m.LogSlot("outbox_orders", 3<<30, 90*time.Second)
	m.LogSlot("abandoned", 5<<20, 0) // no relay of the table read it

	expected := `
# HELP outbox_hot_enqueued_total Events queued for delivery right after commit.
# TYPE outbox_hot_enqueued_total counter
outbox_hot_enqueued_total{topic="orders"} 2
# HELP outbox_hot_dropped_total Events the hot path could not take; they wait for the cold path.
# TYPE outbox_hot_dropped_total counter
outbox_hot_dropped_total{topic="orders"} 1
# HELP outbox_cold_enqueued_total Events claimed by the cold path.
# TYPE outbox_cold_enqueued_total counter
outbox_cold_enqueued_total{topic="orders"} 50
# HELP outbox_dead_total Events that went DEAD.
# TYPE outbox_dead_total counter
outbox_dead_total{topic="orders"} 0
outbox_dead_total{topic="payments"} 1
# HELP outbox_queue_depth Events waiting in the queues of the topic's subscriptions.
# TYPE outbox_queue_depth gauge
outbox_queue_depth{queue="cold",topic="orders"} 9
outbox_queue_depth{queue="hot",topic="orders"} 7
# HELP outbox_pending_events NEW and RETRY events of the topic.
# TYPE outbox_pending_events gauge
outbox_pending_events{topic="orders"} 1234
# HELP outbox_oldest_pending_age_seconds How long the earliest due pending event of the topic has been due.
# TYPE outbox_oldest_pending_age_seconds gauge
outbox_oldest_pending_age_seconds{topic="orders"} 90
# HELP outbox_dead_events DEAD events of the topic.
# TYPE outbox_dead_events gauge
outbox_dead_events{topic="payments"} 3
# HELP outbox_unserved_events Pending events of a topic that no subscription of the relay serves.
# TYPE outbox_unserved_events gauge
outbox_unserved_events{topic="found"} 0
outbox_unserved_events{topic="lost"} 12
# HELP outbox_store_errors_total Failed operations of the relay on the database: claim, backlog, record (outcomes and releases, retried) and give_up.
# TYPE outbox_store_errors_total counter
outbox_store_errors_total{operation="claim",topic="orders"} 2
outbox_store_errors_total{operation="record",topic=""} 1
# HELP outbox_log_slot_lag_bytes Log a log slot holds back, from its confirmed position to the database's current one.
# TYPE outbox_log_slot_lag_bytes gauge
outbox_log_slot_lag_bytes{slot="abandoned"} 5.24288e+06
outbox_log_slot_lag_bytes{slot="outbox_orders"} 3.221225472e+09
# HELP outbox_log_slot_confirmed_age_seconds How long ago a reader last confirmed a position in a log slot; 0 when none of this module did.
# TYPE outbox_log_slot_confirmed_age_seconds gauge
outbox_log_slot_confirmed_age_seconds{slot="abandoned"} 0
outbox_log_slot_confirmed_age_seconds{slot="outbox_orders"} 90
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(expected),
		"outbox_hot_enqueued_total", "outbox_hot_dropped_total", "outbox_cold_enqueued_total", "outbox_dead_total",
		"outbox_queue_depth", "outbox_pending_events", "outbox_oldest_pending_age_seconds", "outbox_store_errors_total",
		"outbox_dead_events", "outbox_unserved_events", "outbox_log_slot_lag_bytes", "outbox_log_slot_confirmed_age_seconds"))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems, "series names and help texts as Prometheus's linter wants them")
	require.Equal(t, 1, testutil.CollectAndCount(reg, "outbox_delivery_latency_seconds"))
	require.Equal(t, 1, testutil.CollectAndCount(reg, "outbox_failures_total"))
	require.Equal(t, 1, testutil.CollectAndCount(reg, "outbox_handler_duration_seconds"))

	_, err = prommetrics.New(reg, prommetrics.Config{})
	require.Error(t, err, "registering twice is refused")
	_, err = prommetrics.New(nil, prommetrics.Config{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
}

// The counters of a topic whose backlog was read exist from 0, so that
// increase() sees its first event: a DEAD event alert must fire on a
// relay's first DEAD event too.
func TestCountersOfAnObservedTopicStartAtZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m, err := prommetrics.New(reg, prommetrics.Config{})
	require.NoError(t, err)
	m.Delivered("orders", time.Millisecond)
	m.Backlog("orders", 0, 0)
	m.Backlog("orders", 0, 0)

	expected := `
# HELP outbox_delivered_total Acknowledged events.
# TYPE outbox_delivered_total counter
outbox_delivered_total{topic="orders"} 1
# HELP outbox_dead_total Events that went DEAD.
# TYPE outbox_dead_total counter
outbox_dead_total{topic="orders"} 0
# HELP outbox_failures_total Failed deliveries scheduled for another attempt.
# TYPE outbox_failures_total counter
outbox_failures_total{topic="orders"} 0
# HELP outbox_hot_dropped_total Events the hot path could not take; they wait for the cold path.
# TYPE outbox_hot_dropped_total counter
outbox_hot_dropped_total{topic="orders"} 0
# HELP outbox_hot_enqueued_total Events queued for delivery right after commit.
# TYPE outbox_hot_enqueued_total counter
outbox_hot_enqueued_total{topic="orders"} 0
# HELP outbox_cold_enqueued_total Events claimed by the cold path.
# TYPE outbox_cold_enqueued_total counter
outbox_cold_enqueued_total{topic="orders"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(expected),
		"outbox_delivered_total", "outbox_dead_total", "outbox_failures_total",
		"outbox_hot_dropped_total", "outbox_hot_enqueued_total", "outbox_cold_enqueued_total"))
}

// The handler duration is a histogram by topic and outcome, on the
// latency buckets.
func TestHandlerDuration(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m, err := prommetrics.New(reg, prommetrics.Config{Namespace: "relay", LatencyBuckets: []float64{0.1, 1}})
	require.NoError(t, err)
	m.Handled("orders", true, 50*time.Millisecond)
	m.Handled("orders", true, 500*time.Millisecond)
	m.Handled("orders", false, 2*time.Second)

	expected := `
# HELP relay_handler_duration_seconds Time from an event's message being handed to the handler to its ack or nack (outcome).
# TYPE relay_handler_duration_seconds histogram
relay_handler_duration_seconds_bucket{outcome="ack",topic="orders",le="0.1"} 1
relay_handler_duration_seconds_bucket{outcome="ack",topic="orders",le="1"} 2
relay_handler_duration_seconds_bucket{outcome="ack",topic="orders",le="+Inf"} 2
relay_handler_duration_seconds_sum{outcome="ack",topic="orders"} 0.55
relay_handler_duration_seconds_count{outcome="ack",topic="orders"} 2
relay_handler_duration_seconds_bucket{outcome="nack",topic="orders",le="0.1"} 0
relay_handler_duration_seconds_bucket{outcome="nack",topic="orders",le="1"} 0
relay_handler_duration_seconds_bucket{outcome="nack",topic="orders",le="+Inf"} 1
relay_handler_duration_seconds_sum{outcome="nack",topic="orders"} 2
relay_handler_duration_seconds_count{outcome="nack",topic="orders"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(expected), "relay_handler_duration_seconds"))
}

// Prometheus checks histogram buckets only at the first observation, by
// panicking on the delivery path: New checks them.
func TestBucketsOutOfOrderAreRefused(t *testing.T) {
	t.Parallel()
	for _, buckets := range [][]float64{{1, 0.5}, {0.1, 0.1}, {0.1, math.NaN()}} {
		_, err := prommetrics.New(prometheus.NewPedanticRegistry(), prommetrics.Config{LatencyBuckets: buckets})
		require.ErrorIs(t, err, outbox.ErrInvalidRequest, "%v", buckets)
	}
	m, err := prommetrics.New(prometheus.NewPedanticRegistry(), prommetrics.Config{LatencyBuckets: []float64{0.1, 1}})
	require.NoError(t, err)
	m.Delivered("orders", time.Millisecond)
}

// A New that fails on one collector unregisters those it registered, so
// that a New after fixing the cause succeeds.
func TestFailedNewLeavesNothingRegistered(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	// The same series as New's: the registry forgets the shape of a series
	// it had only when all of its collectors are unregistered.
	clash := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outbox_delivered_total", Help: "Acknowledged events."}, []string{"topic"})
	require.NoError(t, reg.Register(clash))
	_, err := prommetrics.New(reg, prommetrics.Config{})
	require.ErrorContains(t, err, "prommetrics: register")

	require.True(t, reg.Unregister(clash))
	_, err = prommetrics.New(reg, prommetrics.Config{})
	require.NoError(t, err)
}
