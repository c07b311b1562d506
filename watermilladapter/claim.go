package watermilladapter

import (
	"time"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// claimParams is the claim of sub's topic at now of up to limit events:
// of the aggregates named, or from after (nil: the earliest due event).
func (sub *subscription) claimParams(now time.Time, limit int, named []outboxdriver.Aggregate, after *outboxdriver.Position) *outboxdriver.ClaimParams {
	cfg := &sub.s.cfg
	return &outboxdriver.ClaimParams{
		Owner:         sub.s.owner,
		Topic:         sub.topic,
		Now:           now,
		CreatedBefore: now.Add(-cfg.SkipRecent),
		LockedUntil:   now.Add(cfg.LockTimeout),
		Limit:         limit,
		After:         after,
		Ordered:       cfg.Ordered,
		Aggregates:    named,
	}
}
