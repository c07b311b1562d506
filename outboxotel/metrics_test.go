package outboxotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outboxotel"
)

// series is one data point of a collection: instrument name and
// attributes, as "name{k=v,...}".
type series map[string]any

func collect(t *testing.T, reader *sdkmetric.ManualReader) (series, map[string]string) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	got, units := series{}, map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, outboxotel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			units[m.Name] = m.Unit
			key := func(set attribute.Set) string {
				s := m.Name + "{"
				for i, kv := range set.ToSlice() {
					if i > 0 {
						s += ","
					}
					s += string(kv.Key) + "=" + kv.Value.String()
				}
				return s + "}"
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					got[key(p.Attributes)] = p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					got[key(p.Attributes)] = p.Value
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					got[key(p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					got[key(p.Attributes)] = [2]any{p.Count, p.Sum}
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return got, units
}

// Every method of outbox.Metrics lands in its instrument, with the
// attributes and units of prommetrics' series.
func TestMetrics(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(context.Background())) })
	m, err := outboxotel.NewMetrics(outboxotel.MetricsConfig{MeterProvider: mp})
	require.NoError(t, err)
	var _ outbox.Metrics = m

	m.Backlog("payments", 0, 0) // the counters of payments start at 0
	m.HotEnqueued("orders")
	m.HotEnqueued("orders")
	m.HotDropped("orders")
	m.ColdEnqueued("orders", 5)
	m.Delivered("orders", 250*time.Millisecond)
	m.Delivered("orders", 750*time.Millisecond)
	m.Failed("orders")
	m.Dead("orders")
	m.AddQueueDepths("orders", 3, 4)
	m.AddQueueDepths("orders", -1, 0)
	m.Backlog("orders", 12, 90*time.Second)
	m.StoreError("orders", "claim")
	m.StoreError("", "record")
	m.DeadEvents("orders", 2)
	m.Handled("orders", true, 2*time.Second)
	m.Handled("orders", false, time.Second)
	m.Purged("done", 100)
	m.Purged("done", 20)
	m.Unserved("lost", 7)
	m.LogSlot("outbox_orders", 3<<30, 90*time.Second)

	got, units := collect(t, reader)
	want := series{
		"outbox.hot_enqueued{topic=orders}":                  int64(2),
		"outbox.hot_dropped{topic=orders}":                   int64(1),
		"outbox.cold_enqueued{topic=orders}":                 int64(5),
		"outbox.delivered{topic=orders}":                     int64(2),
		"outbox.failures{topic=orders}":                      int64(1),
		"outbox.dead{topic=orders}":                          int64(1),
		"outbox.queue_depth{queue=hot,topic=orders}":         int64(2),
		"outbox.queue_depth{queue=cold,topic=orders}":        int64(4),
		"outbox.pending_events{topic=orders}":                int64(12),
		"outbox.oldest_pending_age{topic=orders}":            90.0,
		"outbox.dead_events{topic=orders}":                   int64(2),
		"outbox.store_errors{operation=claim,topic=orders}":  int64(1),
		"outbox.store_errors{operation=record,topic=}":       int64(1),
		"outbox.delivery_latency{topic=orders}":              [2]any{uint64(2), 1.0},
		"outbox.handler_duration{outcome=ack,topic=orders}":  [2]any{uint64(1), 2.0},
		"outbox.handler_duration{outcome=nack,topic=orders}": [2]any{uint64(1), 1.0},
		"outbox.purged_rows{kind=done}":                      int64(120),
		"outbox.unserved_events{topic=lost}":                 int64(7),
		"outbox.log_slot_lag{slot=outbox_orders}":            int64(3 << 30),
		"outbox.log_slot_confirmed_age{slot=outbox_orders}":  90.0,
		"outbox.pending_events{topic=payments}":              int64(0),
		"outbox.oldest_pending_age{topic=payments}":          0.0,
	}
	for _, name := range []string{"hot_enqueued", "hot_dropped", "cold_enqueued", "delivered", "failures", "dead"} {
		want["outbox."+name+"{topic=payments}"] = int64(0)
	}
	require.Equal(t, want, got)
	require.Equal(t, map[string]string{
		"outbox.hot_enqueued": "{event}", "outbox.hot_dropped": "{event}", "outbox.cold_enqueued": "{event}",
		"outbox.delivered": "{event}", "outbox.failures": "{event}", "outbox.dead": "{event}",
		"outbox.queue_depth": "{event}", "outbox.pending_events": "{event}", "outbox.oldest_pending_age": "s",
		"outbox.dead_events": "{event}", "outbox.store_errors": "{error}", "outbox.delivery_latency": "s",
		"outbox.handler_duration": "s", "outbox.purged_rows": "{row}", "outbox.unserved_events": "{event}",
		"outbox.log_slot_lag": "By", "outbox.log_slot_confirmed_age": "s",
	}, units)
}

func TestMetricsConfig(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(context.Background())) })

	_, err := outboxotel.NewMetrics(outboxotel.MetricsConfig{MeterProvider: mp, LatencyBuckets: []float64{1, 1}})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)

	m, err := outboxotel.NewMetrics(outboxotel.MetricsConfig{MeterProvider: mp, Namespace: "relay", LatencyBuckets: []float64{0.1, 1}})
	require.NoError(t, err)
	m.Delivered("orders", 500*time.Millisecond)
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var found bool
	for _, mm := range rm.ScopeMetrics[0].Metrics {
		if h, ok := mm.Data.(metricdata.Histogram[float64]); ok && mm.Name == "relay.delivery_latency" {
			found = true
			require.Equal(t, []float64{0.1, 1}, h.DataPoints[0].Bounds)
			require.Equal(t, []uint64{0, 1, 0}, h.DataPoints[0].BucketCounts)
		}
	}
	require.True(t, found, "relay.delivery_latency")
}
