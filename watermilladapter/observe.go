package watermilladapter

import (
	"log/slog"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// observe reports queue depths, the topic's backlog and its count of DEAD
// events every BacklogInterval until the subscription stops, and then
// takes back the depths it reported. When the backlog cannot be read (the
// database is down or stalled), it goes on reporting the age of the
// oldest pending event it last saw, which keeps growing, so that an alert
// on that age fires in the outage it is there for rather than see the
// last value frozen, and the DEAD count it last read. The two reads
// together wait at most BacklogInterval, so that the depths are reported
// on time too.
func (sub *subscription) observe() {
	cfg := &sub.s.cfg
	ticker := cfg.Clock.NewTimer(cfg.BacklogInterval)
	defer ticker.Stop()
	var hot, cold int
	defer func() { cfg.Metrics.AddQueueDepths(sub.topic, -hot, -cold) }()
	var pending, dead int64
	var oldest time.Time
	// Nothing to report before a read succeeds: a subscription that
	// starts in an outage must not overwrite a real measurement with 0.
	read, deadRead := false, false
	for {
		h, c := sub.hotDepth(), len(sub.cold)+int(sub.held.Load()) // runs included
		cfg.Metrics.AddQueueDepths(sub.topic, h-hot, c-cold)
		hot, cold = h, c
		// The reads: stopping cancels them, so that Close does not wait
		// for them.
		ctx, cancel := withTimeout(sub.stopped, cfg.Clock, min(claimTimeout, cfg.BacklogInterval))
		n, first, err := sub.s.driver.Backlog(ctx, sub.topic)
		switch {
		case err == nil:
			pending, oldest, read = n, first, true
		case !sub.stopping(): // not a read that Close cut short
			cfg.Logger.Error("outbox: backlog query failed; reporting the oldest pending event last seen",
				slog.String("topic", sub.topic), slog.Time("oldest", oldest), slog.Any("error", err))
			cfg.Metrics.StoreError(sub.topic, "backlog")
		}
		// After a failed backlog read the database is out of reach: the
		// count would only wait out the same bound, and log it again.
		if err == nil {
			n, err = sub.s.driver.CountDead(ctx, outboxdriver.DeadFilter{Topic: sub.topic})
			switch {
			case err == nil:
				dead, deadRead = n, true
			case !sub.stopping():
				cfg.Logger.Error("outbox: dead count query failed; reporting the count last read",
					slog.String("topic", sub.topic), slog.Int64("dead", dead), slog.Any("error", err))
				cfg.Metrics.StoreError(sub.topic, "count_dead")
			}
		}
		cancel()
		if read {
			var age time.Duration
			if !oldest.IsZero() {
				age = max(cfg.Clock.Now().Sub(oldest), 0)
			}
			cfg.Metrics.Backlog(sub.topic, pending, age)
		}
		if deadRead {
			cfg.Metrics.DeadEvents(sub.topic, dead)
		}
		select {
		case <-sub.stopped.Done():
			return
		case <-ticker.C():
			ticker.Reset(cfg.BacklogInterval)
		}
	}
}
