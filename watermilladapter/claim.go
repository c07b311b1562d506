package watermilladapter

import (
	"time"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// claimParams is the claim of sub's topic at now of up to limit events
// (ordered, limit runs of room events in all): of the aggregates named, or
// from after (nil: the earliest due event).
func (sub *subscription) claimParams(now time.Time, limit, room int, named []outboxdriver.Aggregate, after *outboxdriver.Position) *outboxdriver.ClaimParams {
	cfg := &sub.s.cfg
	createdBefore := now.Add(-cfg.SkipRecent)
	if f := sub.s.feed; f != nil && len(named) == 0 {
		// Named, in log mode, the aggregates are parked: the feed leaves
		// all their events to claims.
		if covered := f.createdBefore(now); covered.Before(createdBefore) {
			createdBefore = covered
		}
	}
	p := &outboxdriver.ClaimParams{
		Owner:         sub.s.owner,
		Topic:         sub.topic,
		Now:           now,
		CreatedBefore: createdBefore,
		LockedUntil:   now.Add(cfg.LockTimeout),
		Limit:         limit,
		After:         after,
		Ordered:       cfg.Ordered,
		Aggregates:    named,
		// In log mode, the events of a parked aggregate that the feed
		// has not left to claims yet are the feed's.
		AggregateBounds: sub.claimBounds(named),
	}
	if cfg.Ordered && cfg.OrderedRunLength > 1 {
		p.RunLength, p.RunRows = cfg.OrderedRunLength, room
	}
	return p
}
