package watermilladapter

import (
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// observe reports queue depths and the topic's backlog every
// BacklogInterval until the subscription stops, and then takes back the
// depths it reported. When the backlog cannot be read (the database is
// down or stalled), it goes on reporting the age of the oldest pending
// event it last saw, which keeps growing, so that an alert on that age
// fires in the outage it is there for rather than see the last value
// frozen; the read waits at most BacklogInterval, so that the depths are
// reported on time too.
func (sub *subscription) observe() {
	cfg := &sub.s.cfg
	ticker := cfg.Clock.NewTimer(cfg.BacklogInterval)
	defer ticker.Stop()
	var hot, cold int
	defer func() { cfg.Metrics.AddQueueDepths(sub.topic, -hot, -cold) }()
	var pending int64
	var oldest time.Time
	read := false // no backlog to report before a read succeeds
	for {
		h, c := len(sub.hot), len(sub.cold)
		cfg.Metrics.AddQueueDepths(sub.topic, h-hot, c-cold)
		hot, cold = h, c
		// A read: stopping cancels it, so that Close does not wait for it.
		ctx, cancel := withTimeout(sub.stopped, cfg.Clock, min(claimTimeout, cfg.BacklogInterval))
		n, first, err := sub.s.driver.Backlog(ctx, sub.topic)
		cancel()
		switch {
		case err == nil:
			pending, oldest, read = n, first, true
		case !sub.stopping(): // not a read that Close cut short
			cfg.Logger.Error("outbox backlog query failed; reporting the oldest pending event last seen", err,
				watermill.LogFields{"topic": sub.topic, "oldest": oldest})
			cfg.Metrics.StoreError(sub.topic, "backlog")
		}
		if read {
			var age time.Duration
			if !oldest.IsZero() {
				age = max(cfg.Clock.Now().Sub(oldest), 0)
			}
			cfg.Metrics.Backlog(sub.topic, pending, age)
		}
		select {
		case <-sub.stopped.Done():
			return
		case <-ticker.C():
			ticker.Reset(cfg.BacklogInterval)
		}
	}
}
