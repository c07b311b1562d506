package watermilladapter

import "time"

// nopMetrics is SubscriberConfig.Metrics when none is given: it discards
// every measurement, and the observer does not run.
type nopMetrics struct{}

func (nopMetrics) HotEnqueued(string)                   {}
func (nopMetrics) HotDropped(string)                    {}
func (nopMetrics) ColdEnqueued(string, int)             {}
func (nopMetrics) Delivered(string, time.Duration)      {}
func (nopMetrics) Failed(string)                        {}
func (nopMetrics) Dead(string)                          {}
func (nopMetrics) AddQueueDepths(string, int, int)      {}
func (nopMetrics) Backlog(string, int64, time.Duration) {}
func (nopMetrics) StoreError(string, string)            {}
func (nopMetrics) DeadEvents(string, int64)             {}
func (nopMetrics) Handled(string, bool, time.Duration)  {}
func (nopMetrics) Purged(string, int64)                 {}
func (nopMetrics) Unserved(string, int64)               {}
func (nopMetrics) LogSlot(string, int64, time.Duration) {}
