package watermilladapter

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// A relay proves that it is alive by renewing its heartbeat, a row of the
// lease table, every HeartbeatInterval until HeartbeatTimeout from then.
// Relays that have been alive for HeartbeatTimeout hand back the claims
// of relays whose heartbeat expired: a relay that dies loses its claims
// within seconds, while a live one keeps them as long as its handlers
// take, up to LockTimeout.

// reapLimit is the most dead relays one heartbeat releases; more wait for
// the next.
const reapLimit = 100

// heartbeat renews the relay's heartbeat and releases dead relays' claims.
// Its state is the loop's, and the first beat's before the loop starts.
type heartbeat struct {
	s *Subscriber

	once    sync.Once     // the first beat, at the first Subscribe
	stop    chan struct{} // closed to end the loop
	done    chan struct{} // closed when the loop ended
	started bool          // the loop runs; under s.mu

	beaten       bool      // a heartbeat succeeded once
	failing      bool      // the last heartbeat failed
	lastSuccess  time.Time // when the last successful heartbeat returned
	healthySince time.Time // since when heartbeats succeeded without a break
}

func newHeartbeat(s *Subscriber) *heartbeat {
	return &heartbeat{s: s, stop: make(chan struct{}), done: make(chan struct{})}
}

// first writes the heartbeat once, before the first subscription claims
// or takes hot events: any row this relay claims has its heartbeat.
func (h *heartbeat) first() {
	h.once.Do(h.beat)
}

// start runs the loop; s.mu is held and the Subscriber not closed.
func (h *heartbeat) start() {
	if h.started {
		return
	}
	h.started = true
	go h.loop()
}

func (h *heartbeat) loop() {
	defer close(h.done)
	cfg := &h.s.cfg
	timer := cfg.Clock.NewTimer(cfg.HeartbeatInterval)
	defer timer.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-timer.C():
		}
		h.beat()
		timer.Reset(cfg.HeartbeatInterval)
	}
}

// beat renews the heartbeat and, once heartbeats have succeeded without a
// break for HeartbeatTimeout, releases the claims of dead relays. The
// grace lets every live relay renew after a database outage, which
// expires every heartbeat, before any relay takes them for dead.
func (h *heartbeat) beat() {
	cfg := &h.s.cfg
	ctx, cancel := h.statementContext()
	defer cancel()
	existed, err := h.s.driver.Heartbeat(ctx, outboxdriver.HeartbeatParams{Owner: h.s.owner,
		Until: cfg.Clock.Now().Add(cfg.HeartbeatTimeout)})
	now := cfg.Clock.Now()
	if err != nil {
		if !h.failing {
			cfg.Logger.Warn("outbox: heartbeat failed; other relays take this relay for dead if it goes on failing",
				slog.String("owner", h.s.owner), slog.Duration("heartbeat_timeout", cfg.HeartbeatTimeout), slog.Any("error", err))
		}
		h.failing, h.healthySince = true, time.Time{}
		cfg.Metrics.StoreError("", "heartbeat")
		return
	}
	if h.beaten && !existed {
		cfg.Logger.Warn("outbox: this relay was presumed dead and its claims released; events in flight may be delivered twice",
			slog.String("owner", h.s.owner))
	}
	if h.failing || h.healthySince.IsZero() || now.Sub(h.lastSuccess) > cfg.HeartbeatTimeout {
		h.healthySince = now
	}
	h.beaten, h.failing, h.lastSuccess = true, false, now
	if now.Sub(h.healthySince) >= cfg.HeartbeatTimeout {
		h.reap(ctx, now)
	}
}

// reap releases the claims of relays whose heartbeat expired before now,
// and wakes the relays of their topics.
func (h *heartbeat) reap(ctx context.Context, now time.Time) {
	cfg := &h.s.cfg
	released, err := h.s.driver.ReleaseDeadRelays(ctx, outboxdriver.ReleaseDeadRelaysParams{Now: now, Limit: reapLimit})
	if err != nil {
		cfg.Logger.Warn("outbox: release the claims of dead relays failed; retrying at the next heartbeat",
			slog.String("owner", h.s.owner), slog.Any("error", err))
		cfg.Metrics.StoreError("", "release_dead")
	}
	for _, r := range released {
		cfg.Logger.Info("outbox: released the claims of relay "+r.Owner+" presumed dead",
			slog.String("owner", r.Owner), slog.Int64("events", r.Events), slog.Any("topics", r.Topics))
		if len(r.Topics) > 0 {
			h.s.released(r.Topics...)
		}
	}
}

// statementContext bounds a heartbeat's statements to half the timeout:
// a database that does not answer makes the next heartbeat try again.
func (h *heartbeat) statementContext() (context.Context, context.CancelFunc) {
	return withTimeout(context.Background(), h.s.cfg.Clock, h.s.cfg.HeartbeatTimeout/2)
}

// end stops the loop and, when Close recorded everything (recorded), deletes
// the heartbeat: this relay holds no claim any more. Otherwise the
// heartbeat expires and other relays release what this one still holds.
func (h *heartbeat) end(recorded bool) {
	h.s.mu.Lock()
	started := h.started
	h.s.mu.Unlock()
	if !started {
		return
	}
	close(h.stop)
	<-h.done
	if !recorded {
		return
	}
	ctx, cancel := h.statementContext()
	defer cancel()
	if err := h.s.driver.EndHeartbeat(ctx, h.s.owner); err != nil {
		h.s.cfg.Logger.Warn("outbox: ending the heartbeat failed; it expires by itself",
			slog.String("owner", h.s.owner), slog.Any("error", err))
	}
}
