package watermilladapter

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// slotDriver is a driver whose database has the log slots of its field
// slots, or fails to read them while down is set.
type slotDriver struct {
	instantDriver
	mu    sync.Mutex
	slots []outboxdriver.LogSlot
	down  bool
	reads int
}

func (d *slotDriver) LogSlots(context.Context) ([]outboxdriver.LogSlot, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reads++
	if d.down {
		return nil, errors.New("database unreachable")
	}
	return append([]outboxdriver.LogSlot(nil), d.slots...), nil
}

func (d *slotDriver) set(down bool, slots ...outboxdriver.LogSlot) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down, d.slots = down, slots
}

// slotMetrics records the reports of LogSlot, in order, and the store
// errors.
type slotMetrics struct {
	nopMetrics
	mu          sync.Mutex
	reports     []slotMetric
	storeErrors []string
}

// slotMetric is one LogSlot report.
type slotMetric struct {
	slot         string
	lagBytes     int64
	confirmedAge time.Duration
}

func (m *slotMetrics) LogSlot(slot string, lagBytes int64, confirmedAge time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reports = append(m.reports, slotMetric{slot, lagBytes, confirmedAge})
}

func (m *slotMetrics) StoreError(topic, operation string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.storeErrors = append(m.storeErrors, topic+"/"+operation)
}

// take returns the reports and store errors since the last take.
func (m *slotMetrics) take() ([]slotMetric, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	reports, errs := m.reports, m.storeErrors
	m.reports, m.storeErrors = nil, nil
	return reports, errs
}

// slotSubscriber returns a subscriber of cfg on driver, on a test clock,
// and the metrics it reports to.
func slotSubscriber(t *testing.T, driver outboxdriver.Driver[fakeTx], cfg SubscriberConfig) (*Subscriber, *slotMetrics, *clocktest.Clock) {
	t.Helper()
	clock := clocktest.New(testStart)
	metrics := &slotMetrics{}
	cfg.Metrics, cfg.Clock = metrics, clock
	sub, err := NewSubscriber(fakeStore(t, driver, clock), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, closeOnClock(t, sub, clock)) })
	return sub, metrics, clock
}

// Each slot is reported with its lag and the age of its confirmed
// position on the subscriber's clock (0 for a slot no relay confirmed);
// a slot that is gone is reported once with 0 and 0; a failed read
// reports nothing and counts a store error.
func TestReportSlots(t *testing.T) {
	t.Parallel()
	driver := &slotDriver{}
	sub, metrics, clock := slotSubscriber(t, driver, SubscriberConfig{})
	ctx := t.Context()

	orders := outboxdriver.LogSlot{Name: "outbox_orders", Active: true, LagBytes: 3 << 30, WALStatus: "extended",
		Reader: "relay-1", ConfirmedAt: clock.Now().Add(-90 * time.Second)}
	debezium := outboxdriver.LogSlot{Name: "debezium", LagBytes: 5 << 20, WALStatus: "reserved"}
	driver.set(false, orders, debezium)
	sub.reportSlots(ctx)
	reports, errs := metrics.take()
	require.ElementsMatch(t, []slotMetric{{"outbox_orders", 3 << 30, 90 * time.Second}, {"debezium", 5 << 20, 0}}, reports)
	require.Empty(t, errs)

	clock.Advance(time.Minute)
	driver.set(true)
	sub.reportSlots(ctx)
	reports, errs = metrics.take()
	require.Empty(t, reports, "the gauges hold while the slots cannot be read")
	require.Equal(t, []string{"/log_slots"}, errs)

	driver.set(false, debezium)
	sub.reportSlots(ctx)
	reports, _ = metrics.take()
	require.ElementsMatch(t, []slotMetric{{"debezium", 5 << 20, 0}, {"outbox_orders", 0, 0}}, reports,
		"the dropped slot's gauges fall to 0")

	sub.reportSlots(ctx)
	reports, _ = metrics.take()
	require.Equal(t, []slotMetric{{"debezium", 5 << 20, 0}}, reports, "a slot that is gone is reported once")
}

// The slots are read from the store's driver even when a tracer wraps it.
func TestReportSlotsThroughATracer(t *testing.T) {
	t.Parallel()
	driver := &slotDriver{}
	sub, metrics, _ := slotSubscriber(t, driver, SubscriberConfig{Tracer: &statementLog{}})
	driver.set(false, outboxdriver.LogSlot{Name: "outbox_orders", LagBytes: 42})
	sub.reportSlots(t.Context())
	reports, _ := metrics.take()
	require.Equal(t, []slotMetric{{"outbox_orders", 42, 0}}, reports)
}

// A store whose driver has no log slots, or a subscriber without
// Metrics, reads and reports nothing.
func TestReportSlotsWithoutSlotsOrMetrics(t *testing.T) {
	t.Parallel()
	sub, metrics, _ := slotSubscriber(t, &instantDriver{}, SubscriberConfig{})
	sub.reportSlots(t.Context())
	reports, errs := metrics.take()
	require.Empty(t, reports)
	require.Empty(t, errs)

	driver := &slotDriver{}
	driver.set(false, outboxdriver.LogSlot{Name: "outbox_orders", LagBytes: 42})
	clock := clocktest.New(testStart)
	quiet, err := NewSubscriber(fakeStore(t, driver, clock), SubscriberConfig{Clock: clock})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, closeOnClock(t, quiet, clock)) })
	quiet.reportSlots(t.Context())
	require.Zero(t, driver.reads, "no Metrics, no read")
}

// idleFeed streams nothing until its context ends.
type idleFeed struct{}

func (idleFeed) Stream(ctx context.Context, h outboxdriver.FeedHandler) error {
	h.Reading(true)
	<-ctx.Done()
	return nil
}

// A relay in log mode reports the slots as it starts, then every
// BacklogInterval.
func TestLogModeReportsSlotsEveryBacklogInterval(t *testing.T) {
	t.Parallel()
	driver := &slotDriver{}
	driver.set(false, outboxdriver.LogSlot{Name: "outbox_event_relay", LagBytes: 7})
	sub, metrics, clock := slotSubscriber(t, driver, SubscriberConfig{Feed: idleFeed{}, BacklogInterval: time.Minute})
	_, err := sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	var reports []slotMetric
	waitFor(t, "the first report", func() bool { r, _ := metrics.take(); reports = append(reports, r...); return len(reports) > 0 })
	require.Equal(t, []slotMetric{{"outbox_event_relay", 7, 0}}, reports)
	driver.set(false, outboxdriver.LogSlot{Name: "outbox_event_relay", LagBytes: 9})
	advanceUntil(t, clock, time.Minute, "the next report", func() bool {
		r, _ := metrics.take()
		return len(r) == 1 && r[0].lagBytes == 9
	})
}
