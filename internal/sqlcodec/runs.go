package sqlcodec

import (
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// Runs cuts the runs of an ordered claim with runs (see
// outboxdriver.ClaimParams.RunLength) for the dialects that read an
// aggregate's next events apart from its head: after[i] are the events
// read after heads[i], in insert order, as they stand once locked (nil for
// one a lock skipped). Each run stops before its first event that is nil
// or not due at p.Now, and at p.RunLength in all; the runs' k-th events
// are taken before any run's (k+1)-th, up to p.RunRows rows with the heads.
// It returns the followers kept, each with its RunIndex, heads[i]'s run
// first.
func Runs(p *outboxdriver.ClaimParams, heads []outboxdriver.Row, after [][]*outboxdriver.Row) []outboxdriver.Row {
	runs := make([][]*outboxdriver.Row, len(heads))
	for i, fs := range after {
		for _, f := range fs {
			if len(runs[i]) == p.RunLength-1 || f == nil || !due(p, f) {
				break
			}
			runs[i] = append(runs[i], f)
		}
	}
	room := max(p.RunRows, p.Limit) - len(heads)
	taken := make([]int, len(runs))
	for k := 0; room > 0; k++ {
		more := false
		for i, run := range runs {
			if k < len(run) && room > 0 {
				taken[i], room, more = k+1, room-1, true
			}
		}
		if !more {
			break
		}
	}
	var kept []outboxdriver.Row
	for i, run := range runs {
		for k, f := range run[:taken[i]] {
			r := *f
			r.RunIndex = k + 1
			kept = append(kept, r)
		}
	}
	return kept
}

// due reports whether r, read under a lock, is due at p.Now for a claim:
// pending, due, under no lease and, NEW and due at its write, written
// by p.CreatedBefore.
func due(p *outboxdriver.ClaimParams, r *outboxdriver.Row) bool {
	now := Stored(p.Now)
	return (r.Status == int16(outbox.StatusNew) || r.Status == int16(outbox.StatusRetry)) && !r.AvailableAt.After(now) &&
		(!r.CreatedAt.After(Stored(p.CreatedBefore)) || r.Status == int16(outbox.StatusRetry) || r.AvailableAt.After(r.CreatedAt)) &&
		(r.LockedUntil.IsZero() || !r.LockedUntil.After(now))
}
