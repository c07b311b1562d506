package watermilladapter

import (
	"time"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// claimRetry is the least wait after a failed claim, doubling with each
// failure up to the poll interval, whatever wakes the claimer: wake-ups
// come with every commit announced, and a claim that keeps failing (a
// permission, a statement timeout) would otherwise be sent, and logged, at
// their rate.
const claimRetry = 50 * time.Millisecond

// claimRescan is how long unordered claims follow their cursor through a
// backlog before one starts again from the earliest due event, picking up
// events that became due behind the cursor (see outboxdriver.Position); a
// claim that comes back short starts again too, ordered ones only then.
const claimRescan = time.Second

// wakeSignal is what ended a claimer's wait.
type wakeSignal int

const (
	wokenAll   wakeSignal = iota // Wake: a commit, a release: walk the topic
	wokenNamed                   // an ordered commit of this process: claim the aggregates named
	wokenNext                    // an ordered event's DONE: claim its aggregate's next event at once
	wokenRoom                    // a worker took a cold event: the queue has room again
	wokenTimer                   // the poll interval, or a claim time, came
)

// claimPlan decides the cold path's steps: when to claim, how much, from
// where, and how long to wait. It holds no lock, reads no clock and sends
// nothing: the claimer (subscription.claimLoop) tells it the time and what
// happened, and does what it says. Its rules:
//
//   - Claim while there is backlog (a claim came back full) and room in
//     the cold queue; otherwise wait for the poll interval, a wake-up
//     (acted on no sooner than the wake cooldown after the last claim
//     began), an ordered aggregate's next event, room, or a claim time.
//   - Through a backlog, each claim starts where the previous one ended
//     (the cursor). A claim that comes back short starts the next one
//     from the earliest due event, at once if it had followed the cursor,
//     and so does the first unordered claim after claimRescan of backlog.
//   - An ordered claim that only named aggregates brought (a DONE, a
//     commit, a retry coming due) names them rather than walk the topic,
//     whose cost grows with the aggregates held back; names and walks take
//     turns, and a walk comes at least every poll interval.
//   - After a failed claim, nothing brings the next one sooner than the
//     failure pause allows.
type claimPlan struct {
	ordered      bool
	batchSize    int
	least        int // the least room a claim waits for: a batch, or with runs, a run if shorter
	pollInterval time.Duration
	wakeCooldown time.Duration
	skipRecent   time.Duration

	cursor     *outboxdriver.Position // where the next walk starts; nil: from the earliest due event
	usedCursor bool                   // the claim under way started from the cursor
	rescan     time.Time              // when an unordered walk next starts from the earliest due event
	walked     time.Time              // when the last walk began
	claimed    time.Time              // when the last claim began
	failWait   time.Duration          // after a failed claim, the least time to the next
	woken      bool                   // a wake-up came since the last claim
	walk       bool                   // a claim must walk the topic, not only name aggregates
	namedLast  bool                   // the last claim named aggregates
	polled     bool                   // the last wait ended at its timer
}

func newClaimPlan(cfg *SubscriberConfig, now time.Time) *claimPlan {
	p := &claimPlan{
		ordered:      cfg.Ordered,
		batchSize:    cfg.BatchSize,
		least:        cfg.BatchSize,
		pollInterval: cfg.PollInterval,
		wakeCooldown: cfg.WakeCooldown,
		skipRecent:   cfg.SkipRecent,
		rescan:       now.Add(claimRescan),
		walk:         true,
	}
	if cfg.Ordered && cfg.OrderedRunLength > 1 {
		// Runs hold room until their last event is taken: waiting for a
		// batch's worth would hold up the next run of an aggregate that
		// the room for one run serves.
		p.least = min(p.least, cfg.OrderedRunLength)
	}
	return p
}

// begin starts a step, told whether claim times fell due: ones that name
// aggregates (dueNamed), ones that ask for a walk (dueWalk).
func (p *claimPlan) begin(dueNamed, dueWalk bool) {
	// A timer that no claim time explains is the poll's.
	p.walk = p.walk || dueWalk || (p.polled && !dueNamed)
	p.polled = false
}

// limit returns how many events the next claim may take, and false when
// the cold queue holds the claim back: it claims no fewer than a batch
// (with runs, than a run, if shorter), unless the queue is empty.
func (p *claimPlan) limit(free, queued int) (int, bool) {
	if free >= p.least || (free > 0 && queued == 0) {
		return min(p.batchSize, free), true
	}
	return 0, false
}

// signalled takes the wake-ups that came while the claimer was not
// waiting: a claim now sees every commit announced so far. With
// SkipRecent, those commits may be too recent for it: recheck is when a
// walk must follow (zero for none).
func (p *claimPlan) signalled(now time.Time, woken, named bool) (recheck time.Time) {
	if woken {
		p.woken, p.walk = true, true
	}
	if named {
		p.woken = true
	}
	if p.woken && p.skipRecent > 0 {
		recheck = now.Add(p.skipRecent)
	}
	p.walk = p.walk || !p.ordered || !now.Before(p.walked.Add(p.pollInterval))
	p.woken = false
	return recheck
}

// namesFirst reports whether the claim should take the aggregates it
// was told of: always when no walk is pending, so that the walk, which
// costs what the aggregates held back do, does not delay the events this
// relay knows of; otherwise every other claim, so that names arriving
// faster than they are claimed do not put the walk off.
func (p *claimPlan) namesFirst() bool { return !p.walk || !p.namedLast }

// claim reports whether to claim now, named telling whether the claim
// names aggregates, and where a walk starts. Nothing to name and no walk
// pending: what signalled was taken by the claim before.
func (p *claimPlan) claim(now time.Time, named bool) (ok bool, after *outboxdriver.Position) {
	p.namedLast = named
	if !named && !p.walk {
		return false, nil
	}
	p.claimed = now
	p.usedCursor = false
	if !named {
		p.walked = now
		after, p.usedCursor = p.cursor, p.cursor != nil
	}
	return true, after
}

// claimed takes the result of the claim begun by claim: n events of a
// claim of limit, the position of the last (nil when none), and its error.
// It reports whether to claim again at once.
func (p *claimPlan) result(now time.Time, named bool, n, limit int, last *outboxdriver.Position, err error) (again bool) {
	if err != nil {
		p.failWait = min(max(2*p.failWait, claimRetry), p.pollInterval)
	} else {
		p.failWait = 0
	}
	if named {
		if err != nil {
			p.walk = true // the aggregates named are forgotten: the next claim walks
			return false
		}
		return p.walk
	}
	if last != nil {
		p.cursor = last
	}
	full := err == nil && n == limit
	p.walk = err != nil
	// An ordered claim's cursor is an aggregate, not a due time: going
	// back to the first aggregate every second would serve the first ones
	// again and again while the last ones wait. Its walk wraps around when
	// a claim comes back short.
	if !full || (!p.ordered && !now.Before(p.rescan)) {
		p.cursor = nil
		p.rescan = now.Add(claimRescan)
	}
	if full || (err == nil && p.usedCursor) {
		// Backlog: claim again at once. After a short claim that followed
		// the cursor, the next starts from the earliest due event, at once
		// too: what the cursor passed over (a commit a wake-up announced,
		// a release, a lease run out) must not wait for the poll.
		p.walk = true
		return true
	}
	return false
}

// wait returns how long to wait for a signal before claiming anyway:
// the poll interval, or, ordered, what is left of it since the last walk
// (named claims do not put the walk off), unless the wait is for room or
// after a failure. The claimer shortens it to its earliest claim time.
func (p *claimPlan) wait(now time.Time, forRoom bool) time.Duration {
	wait := p.pollInterval
	if p.ordered && !forRoom && p.failWait == 0 {
		wait = max(0, min(wait, p.walked.Add(p.pollInterval).Sub(now)))
	}
	return wait
}

// woke takes what ended the wait.
func (p *claimPlan) woke(s wakeSignal) {
	switch s {
	case wokenAll:
		p.woken, p.walk = true, true
	case wokenNamed:
		p.woken = true
	case wokenRoom:
		p.walk = true
	case wokenTimer:
		p.polled = true
	}
}

// holdOff returns how much longer to wait before the claim a signal
// brought: the rest of the failure pause, or of the wake cooldown after a
// wake-up, counted from when the last claim began; and whether an ordered
// aggregate's next event may end it sooner (it ends a cooldown, not a
// failure pause). Wake-ups that arrive meanwhile join that claim.
func (p *claimPlan) holdOff(now time.Time) (wait time.Duration, nextEnds bool) {
	hold := p.failWait
	if p.woken {
		hold = max(hold, p.wakeCooldown)
	}
	return hold - now.Sub(p.claimed), p.failWait == 0
}
