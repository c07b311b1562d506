package watermilladapter

import (
	"cmp"
	"log/slog"
	"slices"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/claimorder"
	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// claimTimeout bounds one claim statement.
const claimTimeout = 30 * time.Second

// maxClaimAts bounds the claim times a subscription keeps: past it, the
// latest are forgotten, and those events are claimed by a poll instead,
// up to PollInterval after they are due.
const maxClaimAts = 1024

// claimLoop is the cold path: it does what its claimPlan says, on the
// subscription's clock, until the subscription stops.
//
// Stopping does not cancel a claim at once: the server may commit a claim
// whose client gave up, and nobody would release those rows before their
// lease ends. Stopping is checked between claims instead. A claim that
// hangs is given up after claimTimeout, or, once the subscription stops,
// after as long as the settler gives failing statements (settleGiveUp), so
// that Close ends while the database does not answer; what it may have
// claimed is left to the lease.
func (sub *subscription) claimLoop() {
	cfg := &sub.s.cfg
	clock := cfg.Clock
	plan := newClaimPlan(cfg, clock.Now())
	timer := clock.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	switch {
	case sub.releases:
		sub.releaseEarlierClaims()
		close(sub.earlier)
	case sub.earlier != nil:
		select { // the release must not find claims of this run
		case <-sub.earlier:
		case <-sub.stopped.Done():
			return
		}
	}
	for {
		plan.begin(sub.popDue())
		var room chan struct{} // nil unless the cold queue held the claim back
		queuedNow := len(sub.cold) + int(sub.held.Load())
		if limit, ok := plan.limit(cap(sub.cold)-queuedNow, queuedNow); ok {
			if recheck := plan.signalled(clock.Now(), drain(sub.wakeCh), drain(sub.namedCh)); !recheck.IsZero() {
				// This claim sees every commit announced so far, except
				// those younger than SkipRecent: another claim comes when
				// they are not.
				sub.claimAt(claimTime{at: recheck})
			}
			var named []outboxdriver.Aggregate
			if plan.namesFirst() {
				named = sub.takeNext(limit)
			}
			now := clock.Now()
			if ok, after := plan.claim(now, len(named) > 0); ok {
				n, last, stopping, err := sub.claimCold(sub.claimParams(now, limit, cap(sub.cold)-queuedNow, named, after))
				if stopping {
					return
				}
				again := plan.result(clock.Now(), len(named) > 0, n, limit, last, err)
				if err != nil {
					cfg.Logger.Error("outbox: claim failed; retrying after the pause",
						slog.String("topic", sub.topic), slog.Duration("pause", plan.failWait), slog.Any("error", err))
					cfg.Metrics.StoreError(sub.topic, "claim")
				}
				if again {
					continue
				}
			}
		} else {
			room = sub.spaceCh // a worker taking a cold event signals it
		}
		timer.Reset(sub.untilClaim(plan.wait(clock.Now(), room != nil)))
		select {
		case <-sub.stopped.Done():
			return
		case <-sub.wakeCh:
			plan.woke(wokenAll)
		case <-sub.namedCh:
			plan.woke(wokenNamed)
		case <-sub.nextCh:
			plan.woke(wokenNext)
		case <-room:
			plan.woke(wokenRoom)
		case <-timer.C():
			plan.woke(wokenTimer)
		}
		if !sub.holdOff(timer, plan) {
			return
		}
	}
}

// holdOff waits as long as plan.holdOff says, or until an ordered
// aggregate's next event is due when the plan lets that end the wait, and
// reports false if the subscription stops meanwhile. Wake-ups that arrive
// during the wait are merged into the claim after it.
func (sub *subscription) holdOff(timer outbox.Timer, plan *claimPlan) bool {
	wait, nextEnds := plan.holdOff(sub.s.cfg.Clock.Now())
	if wait <= 0 {
		return true
	}
	var next chan struct{}
	if nextEnds {
		next = sub.nextCh
	}
	timer.Reset(wait)
	select {
	case <-sub.stopped.Done():
		return false
	case <-timer.C():
		return true
	case <-next:
		return true
	}
}

// drain reports whether ch was signalled, and takes the signal.
func drain(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// claimCold runs the claim p and queues the events it claimed on the cold
// queue, which has room for them (the claim's limit is the room), the
// events of an ordered run behind their head (see takeRuns). It returns
// how many it queued, runs counting as one, and the position of the last
// (see claimorder.Sort), or reports that the subscription is stopping, and
// then gives what was claimed back to the table.
func (sub *subscription) claimCold(p *outboxdriver.ClaimParams) (n int, last *outboxdriver.Position, stopping bool, err error) {
	ctx, cancel := boundedAfterStop(sub.stopped, sub.s.cfg.Clock, claimTimeout, sub.s.settler.giveUp)
	rows, err := sub.s.driver.Claim(ctx, p)
	cancel()
	if sub.stopping() {
		sub.releaseEvents(rows)
		return 0, nil, true, err
	}
	if len(p.Aggregates) > 0 && sub.lanes != nil {
		rows = sub.keepParked(rows)
	}
	last = claimorder.Sort(rows, p.Ordered)
	if len(rows) > 0 {
		// Before a worker can take them: their outcomes are not counted
		// before their claim.
		sub.s.cfg.Metrics.ColdEnqueued(sub.topic, len(rows))
	}
	var items []queued
	if p.RunLength > 1 {
		items = sub.takeRuns(rows)
	} else {
		items = make([]queued, len(rows))
		for i, r := range rows {
			items[i] = coldItem(r)
		}
	}
	for _, item := range items {
		sub.cold <- item
	}
	return len(items), last, false, err
}

// coldItem is r as the cold queue holds it.
func coldItem(r outboxdriver.Row) queued {
	headers, malformed := codec.DecodeHeaders(r.Headers)
	if r.Malformed == nil {
		r.Malformed = malformed
	}
	// A scheduled or retried event's latency counts from its due time,
	// not from its write.
	since := r.CreatedAt
	if r.AvailableAt.After(since) {
		since = r.AvailableAt
	}
	return queued{row: r, headers: headers, source: SourceCold, since: since}
}

// releaseEarlierClaims hands back the claims that an earlier run of this
// relay, under the same owner, held on the topic when it died (see
// SubscriberConfig.ReleaseEarlierClaims). Only the topic's first
// subscription does, before it claims; the others wait for it, and the
// hot path takes none of the topic's events meanwhile, so that this run
// holds no claim on the topic that the release could end. The time the
// Subscriber was made bounds it too.
func (sub *subscription) releaseEarlierClaims() {
	s := sub.s
	ctx, cancel := withTimeout(sub.stopped, s.cfg.Clock, claimTimeout)
	defer cancel()
	n, err := s.driver.ReleaseOwned(ctx, outboxdriver.ReleaseOwnedParams{Owner: s.owner, Topic: sub.topic, ClaimedBefore: s.made})
	if err != nil {
		s.cfg.Logger.Error("outbox: cannot release the claims of an earlier run of this relay; they are claimed again when their leases end",
			slog.String("owner", s.owner), slog.String("topic", sub.topic), slog.Any("error", err))
		s.cfg.Metrics.StoreError(sub.topic, "release_earlier")
		return
	}
	if n > 0 {
		s.cfg.Logger.Info("outbox: released the claims of an earlier run of this relay",
			slog.String("owner", s.owner), slog.String("topic", sub.topic), slog.Int64("events", n))
	}
}

// claimTime is when the cold path is to claim, and for what: the next
// event of an ordered aggregate, which the claim names, or (zero
// aggregate) whatever a walk finds.
type claimTime struct {
	at        time.Time
	aggregate outboxdriver.Aggregate
}

// scheduleClaim makes the cold path claim at when an event of this
// subscription comes due (a retried or deferred one whose outcome is
// recorded, or one this process wrote for later), so that it does not wait
// for a poll: by its aggregate's name when it is ordered and has one
// (aggregate), so that retries coming due one after another during an
// outage cost a look-up each rather than a walk each.
func (sub *subscription) scheduleClaim(at time.Time, aggregate outboxdriver.Aggregate) {
	if sub.claimAt(claimTime{at: at, aggregate: aggregate}) {
		signal(sub.namedCh) // the claim loop's wait may end too late now
	}
}

// claimAt makes the cold path claim at c.at, and reports whether it is the
// earliest such time.
func (sub *subscription) claimAt(c claimTime) bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	i, _ := slices.BinarySearchFunc(sub.claimAts, c.at, func(e claimTime, at time.Time) int { return e.at.Compare(at) })
	if i < maxClaimAts {
		sub.claimAts = slices.Insert(sub.claimAts, i, c)
		sub.claimAts = sub.claimAts[:min(len(sub.claimAts), maxClaimAts)]
	}
	return i == 0
}

// popDue forgets the claim times due now, for the coming claim: the
// aggregates they name go to next (named), the others ask for a walk.
func (sub *subscription) popDue() (named, walk bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	now := sub.s.cfg.Clock.Now()
	due, _ := slices.BinarySearchFunc(sub.claimAts, now, func(c claimTime, now time.Time) int {
		return cmp.Or(c.at.Compare(now), -1) // at == now is due
	})
	for _, c := range sub.claimAts[:due] {
		if c.aggregate.ID != "" {
			sub.addNextLocked(c.aggregate)
			named = true
		} else {
			walk = true
		}
	}
	sub.claimAts = slices.Delete(sub.claimAts, 0, due)
	return named, walk
}

// untilClaim shortens wait to the earliest claim time, 0 when it is due.
func (sub *subscription) untilClaim(wait time.Duration) time.Duration {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if len(sub.claimAts) == 0 {
		return wait
	}
	return max(0, min(wait, sub.claimAts[0].at.Sub(sub.s.cfg.Clock.Now())))
}
