package watermilladapter

import (
	"context"
	"log/slog"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// slotReporter reads the log slots of a store whose driver has them, for
// Metrics.LogSlot, and remembers which slots it reported.
type slotReporter struct {
	reader   outboxdriver.LogSlotReader
	reported map[string]bool
}

// newSlotReporter returns the slot reporter of driver, nil when driver
// reads no log slots. Take it before a tracer wraps driver, which hides
// it.
func newSlotReporter(driver outboxdriver.Executor) *slotReporter {
	reader, ok := driver.(outboxdriver.LogSlotReader)
	if !ok {
		return nil
	}
	return &slotReporter{reader: reader}
}

// reportSlots reports each log slot of the store's database through
// Metrics.LogSlot: the log it holds back, and how long ago its reader
// last confirmed a position. A slot reported before and gone now (dropped,
// or recreated under another name) is reported once with 0 and 0, so that
// its gauges do not hold a lag nobody has any more. A failed read is
// logged and counted as StoreError("", "log_slots"), and reports nothing:
// the gauges hold their last values. It does nothing when the store's
// driver has no log slots or Metrics is not set. It waits at most
// BacklogInterval, as the backlog reads do, and is called by one goroutine
// at a time: the log-mode relay's, every BacklogInterval.
func (s *Subscriber) reportSlots(ctx context.Context) {
	cfg := &s.cfg
	r := s.slots
	if _, nop := cfg.Metrics.(nopMetrics); nop || r == nil {
		return
	}
	ctx, cancel := withTimeout(ctx, cfg.Clock, min(claimTimeout, cfg.BacklogInterval))
	defer cancel()
	slots, err := r.reader.LogSlots(ctx)
	if err != nil {
		if s.stopped.Err() == nil {
			cfg.Logger.Error("outbox: log slots query failed", slog.Any("error", err))
			cfg.Metrics.StoreError("", "log_slots")
		}
		return
	}
	now := cfg.Clock.Now()
	seen := make(map[string]bool, len(slots))
	for _, slot := range slots {
		cfg.Metrics.LogSlot(slot.Name, slot.LagBytes, slot.ConfirmedAge(now))
		seen[slot.Name] = true
	}
	for name := range r.reported {
		if !seen[name] {
			cfg.Metrics.LogSlot(name, 0, 0)
		}
	}
	r.reported = seen
}
