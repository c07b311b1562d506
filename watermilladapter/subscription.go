package watermilladapter

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// queued is an event waiting for a worker.
type queued struct {
	event  outbox.Event
	source string
	since  time.Time // when it became due (commit, or a later due time), for latency
}

// subscription relays one topic to one output channel.
type subscription struct {
	s     *Subscriber
	topic string
	out   chan *message.Message

	hot, cold chan queued
	wakeCh    chan struct{}   // claim now, or at the end of WakeCooldown
	namedCh   chan struct{}   // claim what next and claimAts name now, or at the end of WakeCooldown, without a walk
	nextCh    chan struct{}   // claim the aggregates in next now: an ordered event's DONE is recorded
	spaceCh   chan struct{}   // a worker took a cold event
	stopped   context.Context // cancelled to stop claiming and taking events
	stop      context.CancelFunc
	abandon   context.Context // cancelled when in-flight messages are given up
	cancel    context.CancelFunc

	// With ReleaseEarlierClaims: closed once the topic's earlier claims
	// are released, by the subscription that releases them (releases).
	earlier  chan struct{}
	releases bool

	mu       sync.Mutex
	claimAts []claimTime                   // when to claim, earliest first: retries recorded, commits too recent for a claim
	next     map[outbox.Aggregate]struct{} // ordered aggregates with an event that may have become due
}

func newSubscription(s *Subscriber, topic string) *subscription {
	abandon, cancel := context.WithCancel(context.Background())
	stopped, stop := context.WithCancel(context.Background())
	return &subscription{
		s:       s,
		topic:   topic,
		out:     make(chan *message.Message),
		hot:     make(chan queued, s.cfg.HotQueueCapacity),
		cold:    make(chan queued, s.cfg.ColdQueueCapacity),
		wakeCh:  make(chan struct{}, 1),
		namedCh: make(chan struct{}, 1),
		nextCh:  make(chan struct{}, 1),
		spaceCh: make(chan struct{}, 1),
		stopped: stopped,
		stop:    stop,
		abandon: abandon,
		cancel:  cancel,
	}
}

func (sub *subscription) stopping() bool { return sub.stopped.Err() != nil }

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (sub *subscription) wake() { signal(sub.wakeCh) }

// claimNext makes the cold path claim the next event of aggregate at once,
// whatever WakeCooldown says: the DONE of the ordered event before it is
// recorded. An aggregate's events follow one another at the pace of a
// claim and an outcome statement, not of the cooldown; the claim names
// the aggregates it is for, rather than walking every aggregate of the
// topic (see outbox.ClaimRequest.Aggregates).
func (sub *subscription) claimNext(aggregate outbox.Aggregate) {
	sub.addNext(aggregate)
	signal(sub.nextCh)
}

// wakeFor is wake for an ordered event of aggregate this process
// committed: the claim it brings, at the end of WakeCooldown, names the
// aggregate rather than walk the topic.
func (sub *subscription) wakeFor(aggregate outbox.Aggregate) {
	sub.addNext(aggregate)
	signal(sub.namedCh)
}

func (sub *subscription) addNext(aggregate outbox.Aggregate) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.addNextLocked(aggregate)
}

func (sub *subscription) addNextLocked(aggregate outbox.Aggregate) {
	if sub.next == nil {
		sub.next = make(map[outbox.Aggregate]struct{})
	}
	sub.next[aggregate] = struct{}{}
}

// takeNext returns up to limit of the aggregates claimNext and wakeFor
// were told of, and forgets them; what is left signals nextCh, for a
// claim at once.
func (sub *subscription) takeNext(limit int) []outbox.Aggregate {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if len(sub.next) == 0 {
		return nil
	}
	next := make([]outbox.Aggregate, 0, min(limit, len(sub.next)))
	for a := range sub.next {
		if len(next) == limit {
			signal(sub.nextCh)
			break
		}
		next = append(next, a)
		delete(sub.next, a)
	}
	return next
}

// offerHot queues a committed event unless the hot queue is full or the
// subscription is stopping.
func (sub *subscription) offerHot(e outbox.Envelope, committed, claimedUntil time.Time) bool {
	if sub.stopping() {
		return false
	}
	// claimedUntil is when the claim the row was written under ends, or
	// a little before: process treats it like a claim's end.
	event := outbox.Event{Envelope: e, Status: outbox.StatusNew, LockedUntil: claimedUntil}
	select {
	case sub.hot <- queued{event: event, source: SourceHot, since: committed}:
		return true
	default:
		return false
	}
}

// run relays until ctx ends or the subscriber closes, then drains: it waits
// up to DrainTimeout for messages in handlers, releases what is left,
// waits for the outcomes and releases to be recorded, and closes the
// output channel.
func (sub *subscription) run(ctx context.Context) {
	defer close(sub.out)
	defer sub.cancel()
	var claimer sync.WaitGroup
	claimer.Go(sub.claimLoop)
	if _, discarded := sub.s.cfg.Metrics.(outbox.NopMetrics); !discarded {
		claimer.Go(sub.observe)
	}

	var workers sync.WaitGroup
	for range sub.s.cfg.WorkerCount {
		workers.Go(sub.work)
	}

	select {
	case <-ctx.Done():
		sub.stop()
	case <-sub.stopped.Done():
	}
	claimer.Wait()

	drained := make(chan struct{})
	go func() { workers.Wait(); close(drained) }()
	timer := time.NewTimer(sub.s.cfg.DrainTimeout)
	defer timer.Stop()
	select {
	case <-drained:
	case <-timer.C:
		sub.cancel() // give up on handlers still running: their events are released
		<-drained
	}
	// No hot event can be queued once the subscription is unlisted.
	sub.s.remove(sub)
	sub.releaseQueued()
	sub.s.settler.flush()
}

// releaseQueued hands the events still queued back to the table, but for
// those whose claim is half spent, which are left to it as process leaves
// them: once the claim ran out, another subscription of this relay may
// have claimed the event again and be delivering it, and a release by the
// same owner would end that claim too.
func (sub *subscription) releaseQueued() {
	var left []releaseItem
	for _, q := range []chan queued{sub.hot, sub.cold} {
		for {
			select {
			case item := <-q:
				if !sub.claimHalfSpent(&item.event) {
					left = append(left, releaseItem{id: item.event.ID, topic: sub.topic})
				}
				continue
			default:
			}
			break
		}
	}
	if len(left) > 0 {
		sub.s.settler.release(left)
	}
}

// claimTimeout bounds one claim statement.
const claimTimeout = 30 * time.Second

// After a failed claim, the next waits claimRetry, doubling with each
// failure up to the poll interval, whatever wakes it: wake-ups come with
// every commit announced, and a claim that keeps failing (a permission, a
// statement timeout) would otherwise be sent, and logged, at their rate.
const claimRetry = 50 * time.Millisecond

// claimRescan is how long unordered claims follow their cursor through a
// backlog before one starts again from the earliest due event, picking up
// events that became due behind the cursor (see outbox.ClaimCursor); a
// claim that comes back short starts again too, ordered ones only then.
const claimRescan = time.Second

// claimLoop is the cold path: claim while there is backlog and room in the
// cold queue; otherwise wait for the poll interval, a wake-up (acted on no
// sooner than WakeCooldown after the last claim started), an ordered
// aggregate's next event (claimNext), room, or the earliest claim time
// this subscription keeps (retries, recent commits).
// After a failed claim, nothing brings the next one sooner than claimRetry
// allows.
//
// An ordered claim that only claimNext and wakeFor brought names their
// aggregates instead of walking the topic's, whose cost grows with the
// aggregates held back (an event in flight, scheduled, retried or DEAD):
// one such walk per DONE made an aggregate's events crawl, and one per
// cooldown made every commit wait for it. Everything else walks,
// and so does a claim once the poll interval has passed since the last
// walk, so that what no signal announces is found at the poll's pace
// however busy the aggregates named keep the relay.
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
	var cursor outbox.ClaimCursor
	rescan := cfg.Clock.Now().Add(claimRescan)
	req := cfg.claimRequest(sub.topic)
	req.Cursor = &cursor
	timer := time.NewTimer(0)
	defer timer.Stop()
	var claimed time.Time      // when the last claim started
	var walked time.Time       // when the last claim that walked the topic started
	var failWait time.Duration // after a failed claim, the least time to the next
	woken := false             // a wake-up came since the last claim
	walk := true               // a claim must walk the topic, not only name aggregates
	namedLast := false         // the last claim named aggregates
	polled := false            // the wait ended at its timer
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
		dueNamed, dueWalk := sub.popDue()
		// A timer that no claim time explains is the poll's.
		walk = walk || dueWalk || (polled && !dueNamed)
		polled = false
		free := cap(sub.cold) - len(sub.cold)
		var room chan struct{} // nil unless the cold queue held the claim back
		if free >= cfg.BatchSize || (free > 0 && len(sub.cold) == 0) {
			req.Limit = min(cfg.BatchSize, free)
			// This claim sees every commit announced so far, except those
			// younger than SkipRecent: another claim comes when they are not.
			select {
			case <-sub.wakeCh:
				woken, walk = true, true
			default:
			}
			select {
			case <-sub.namedCh:
				woken = true
			default:
			}
			if woken && cfg.SkipRecent > 0 {
				sub.claimAt(claimTime{at: cfg.Clock.Now().Add(cfg.SkipRecent)})
			}
			walk = walk || !cfg.Ordered || !cfg.Clock.Now().Before(walked.Add(cfg.PollInterval))
			woken = false
			// Named aggregates first: a walk pending, which costs what the
			// aggregates held back do, does not delay the events this relay
			// knows of. Then the two take turns, so that names arriving
			// faster than they are claimed do not put the walk off.
			var next []outbox.Aggregate
			if !walk || !namedLast {
				next = sub.takeNext(req.Limit)
			}
			namedLast = len(next) > 0
			if len(next) > 0 || walk { // else what signalled was taken by the claim before
				claim := req
				if len(next) > 0 {
					claim.Aggregates, claim.Cursor = next, nil
				} else {
					walked = cfg.Clock.Now()
				}
				fromCursor := claim.Cursor != nil && !cursor.IsZero()
				claimed = time.Now()
				n, stopping, err := sub.claimCold(claim)
				if stopping {
					return
				}
				if err != nil {
					failWait = min(max(2*failWait, claimRetry), cfg.PollInterval)
					cfg.Logger.Error("outbox claim failed", err, watermill.LogFields{"topic": sub.topic, "pause": failWait})
					storeError(cfg.Metrics, sub.topic, "claim")
				} else {
					failWait = 0
				}
				switch {
				case claim.Aggregates != nil && err != nil:
					walk = true // the aggregates named are forgotten: the next claim walks
				case claim.Aggregates != nil:
					if walk {
						continue
					}
				default:
					full := err == nil && n == req.Limit
					walk = err != nil
					// An ordered claim's cursor is an aggregate, not a due
					// time: going back to the first aggregate every second
					// would serve the first ones again and again while the
					// last ones wait. Its walk wraps around when a claim
					// comes back short.
					if now := cfg.Clock.Now(); !full || (!cfg.Ordered && !now.Before(rescan)) {
						cursor.Reset()
						rescan = now.Add(claimRescan)
					}
					if full || (err == nil && fromCursor) {
						// Backlog: claim again at once. After a short claim
						// that followed the cursor, the next starts from the
						// earliest due event, at once too: what the cursor
						// passed over (a commit a wake-up announced, a
						// release, a lease run out) must not wait for the
						// poll.
						walk = true
						continue
					}
				}
			}
		} else {
			room = sub.spaceCh // a worker taking a cold event signals it
		}
		wait := cfg.PollInterval
		if cfg.Ordered && room == nil && failWait == 0 {
			// Named claims restart the wait: the walk they put off is
			// due PollInterval after the last one, not after them.
			wait = max(0, min(wait, walked.Add(cfg.PollInterval).Sub(cfg.Clock.Now())))
		}
		timer.Reset(sub.untilClaim(wait))
		select {
		case <-sub.stopped.Done():
			return
		case <-sub.wakeCh:
			woken, walk = true, true
		case <-sub.namedCh:
			woken = true
		case <-sub.nextCh:
		case <-room:
			walk = true
		case <-timer.C:
			polled = true
		}
		hold := failWait
		if woken {
			hold = max(hold, cfg.WakeCooldown)
		}
		var next chan struct{} // an ordered aggregate's next event ends a cooldown, not a pause after failures
		if failWait == 0 {
			next = sub.nextCh
		}
		if !sub.holdOff(timer, claimed, hold, next) {
			return
		}
	}
}

// holdOff waits until hold has passed since the claim that started at
// claimed, or until next signals, and reports false if the subscription
// stops meanwhile. Wake-ups that arrive during the wait are merged into
// the claim after it.
func (sub *subscription) holdOff(timer *time.Timer, claimed time.Time, hold time.Duration, next <-chan struct{}) bool {
	wait := hold - time.Since(claimed)
	if wait <= 0 {
		return true
	}
	timer.Reset(wait)
	select {
	case <-sub.stopped.Done():
		return false
	case <-timer.C:
		return true
	case <-next:
		return true
	}
}

func (sub *subscription) releaseEvents(events []outbox.Event) {
	if len(events) == 0 {
		return
	}
	items := make([]releaseItem, len(events))
	for i, e := range events {
		items[i] = releaseItem{id: e.ID, topic: sub.topic}
	}
	sub.s.settler.release(items)
}

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
	ticker := time.NewTicker(cfg.BacklogInterval)
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
		ctx, cancel := context.WithTimeout(sub.stopped, min(claimTimeout, cfg.BacklogInterval))
		n, first, err := sub.s.store.Backlog(ctx, sub.topic)
		cancel()
		switch {
		case err == nil:
			pending, oldest, read = n, first, true
		case !sub.stopping(): // not a read that Close cut short
			cfg.Logger.Error("outbox backlog query failed; reporting the oldest pending event last seen", err,
				watermill.LogFields{"topic": sub.topic, "oldest": oldest})
			storeError(cfg.Metrics, sub.topic, "backlog")
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
		case <-ticker.C:
		}
	}
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
	ctx, cancel := context.WithTimeout(sub.stopped, claimTimeout)
	defer cancel()
	n, err := s.store.ReleaseOwned(ctx, s.owner, sub.topic, s.made)
	if err != nil {
		s.cfg.Logger.Error("outbox: cannot release the claims of an earlier run of this relay; they are claimed again when their leases end",
			err, watermill.LogFields{"owner": s.owner, "topic": sub.topic})
		storeError(s.cfg.Metrics, sub.topic, "release_earlier")
		return
	}
	if n > 0 {
		s.cfg.Logger.Info("outbox: released the claims of an earlier run of this relay",
			watermill.LogFields{"owner": s.owner, "topic": sub.topic, "events": n})
	}
}

// maxClaimAts bounds the claim times a subscription keeps: past it, the
// latest are forgotten, and those events are claimed by a poll instead,
// up to PollInterval after they are due.
const maxClaimAts = 1024

// claimCold runs claim and queues the events it claimed on the cold
// queue, which has room for them (the claim's limit is the room). It
// returns how many it queued, or reports that the subscription is
// stopping, and then gives what was claimed back to the table.
func (sub *subscription) claimCold(claim outbox.ClaimRequest) (n int, stopping bool, err error) {
	ctx, cancel := boundedAfterStop(sub.stopped, claimTimeout, sub.s.settler.giveUp)
	events, err := sub.s.store.Claim(ctx, claim)
	cancel()
	if sub.stopping() {
		sub.releaseEvents(events)
		return 0, true, err
	}
	if len(events) > 0 {
		// Before a worker can take them: their outcomes are not counted
		// before their claim.
		sub.s.cfg.Metrics.ColdEnqueued(sub.topic, len(events))
	}
	for _, e := range events {
		// A scheduled or retried event's latency counts from its due
		// time, not from its write.
		since := e.CreatedAt
		if e.AvailableAt.After(since) {
			since = e.AvailableAt
		}
		sub.cold <- queued{event: e, source: SourceCold, since: since}
	}
	return len(events), false, err
}

// claimTime is when the cold path is to claim, and for what: the next
// event of an ordered aggregate, which the claim names, or (zero
// aggregate) whatever a walk finds.
type claimTime struct {
	at        time.Time
	aggregate outbox.Aggregate
}

// scheduleClaim makes the cold path claim at when an event of this
// subscription comes due (a retried or deferred one whose outcome is
// recorded, or one this process wrote for later), so that it does not wait
// for a poll: by its aggregate's name when it is ordered and has one
// (aggregate), so that retries coming due one after another during an
// outage cost a look-up each rather than a walk each.
func (sub *subscription) scheduleClaim(at time.Time, aggregate outbox.Aggregate) {
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

// take returns the next event, 2:1 hot before cold so that a busy hot path
// never starves the cold one, or false when the subscription stops.
func (sub *subscription) take(turn int) (queued, bool) {
	first, second := sub.hot, sub.cold
	if turn%3 == 2 {
		first, second = sub.cold, sub.hot
	}
	for _, q := range []chan queued{first, second} {
		select {
		case item := <-q:
			return sub.took(item), true
		default:
		}
	}
	select {
	case item := <-sub.hot:
		return item, true
	case item := <-sub.cold:
		return sub.took(item), true
	case <-sub.stopped.Done():
		return queued{}, false
	}
}

func (sub *subscription) took(item queued) queued {
	if item.source == SourceCold {
		signal(sub.spaceCh)
	}
	return item
}

func (sub *subscription) work() {
	// One timer per worker, for the hand-overs that wait (see handOver).
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	for turn := 0; ; turn++ {
		if sub.stopping() {
			return
		}
		item, ok := sub.take(turn)
		if !ok {
			return
		}
		sub.process(item, wait)
	}
}

// halfSpent is when half of e's claim is gone: an event not yet in a
// handler by then is left to the next claim (see process).
func (sub *subscription) halfSpent(e *outbox.Event) time.Time {
	return e.LockedUntil.Add(-sub.s.cfg.LockTimeout / 2)
}

// claimHalfSpent reports whether half of e's claim is gone by now.
func (sub *subscription) claimHalfSpent(e *outbox.Event) bool {
	return !e.LockedUntil.IsZero() && !sub.s.cfg.Clock.Now().Before(sub.halfSpent(e))
}

// process delivers one event and records its outcome.
func (sub *subscription) process(item queued, wait *time.Timer) {
	s := sub.s
	e := &item.event
	if sub.claimHalfSpent(e) {
		// Half the claim went by while the event waited for a worker:
		// delivered now, its handler could outlive the claim, and another
		// relay claim and deliver it meanwhile; once the claim ran out,
		// another relay may be delivering it already. The claim's end
		// makes it due again for any relay, this one included. Not a
		// release: this relay may hold a newer claim of the event, queued
		// behind this one, which a release would end too.
		s.cfg.Logger.Info("outbox claim half spent in the queue: event left to the next claim (raise LockTimeout or WorkerCount, or lower the queue capacities)",
			watermill.LogFields{"event_id": e.ID, "topic": sub.topic, "source": item.source, "locked_until": e.LockedUntil})
		return
	}
	if !s.inflight.TryAcquire(e.ID) {
		return // being delivered by another worker, which records its outcome
	}
	defer s.inflight.Release(e.ID)
	if e.Malformed != nil {
		sub.logDead("outbox event cannot be decoded: DEAD", e, e.Malformed)
		dead := outbox.Dead(e.ID, e.Malformed)
		dead.Attempt = e.Attempts + 1
		s.settler.update(outcome{update: dead})
		s.cfg.Metrics.Dead(sub.topic)
		return
	}

	msg := toMessage(e, item.source)
	ctx, cancel := context.WithCancel(sub.abandon)
	defer cancel()
	mctx := &messageContext{Context: ctx}
	msg.SetContext(mctx)

	if !sub.handOver(msg, &item, wait) {
		return
	}
	acked, answered := answer(msg, sub.abandon.Done())
	// The context ends on Ack and Nack, as Watermill's contract says, not
	// once the settler has room for the outcome, which may take as long as
	// the database does.
	cancel()
	switch {
	case !answered && s.cfg.Ordered && !isDone(msg.Nacked()):
		// The handler may still be at work on e: released, e could be
		// delivered again, and the next event of its aggregate after it,
		// while this handler still holds e. The lease holds the
		// aggregate until it ends instead.
		s.cfg.Logger.Info("outbox handler still running at Close: ordered event left to its lease, its aggregate waits",
			watermill.LogFields{"event_id": e.ID, "topic": sub.topic, "locked_until": e.LockedUntil})
	case !answered:
		s.settler.release([]releaseItem{{id: e.ID, topic: sub.topic}})
	case acked:
		done := outcome{update: outbox.Done(e.ID)}
		if sub.holdsBack(e) { // claim the next event of e's aggregate
			done.wake, done.aggregate = sub, outbox.AggregateOf(e.Envelope)
		}
		s.settler.update(done)
		s.cfg.Metrics.Delivered(sub.topic, s.cfg.Clock.Now().Sub(item.since))
	default:
		update := outbox.Decide(e.ID, e.Attempts+1, mctx.slot.errOr(errNacked), s.cfg.RetryPolicy, s.cfg.Clock.Now())
		if update.Status == outbox.StatusDead {
			s.cfg.Metrics.Dead(sub.topic)
			sub.logDead("outbox event is DEAD", e, errors.New(update.Error))
		}
		o := outcome{update: update}
		if !update.NextAt.IsZero() {
			s.cfg.Metrics.Failed(sub.topic)
			o.wake = sub
			if sub.holdsBack(e) {
				o.aggregate = outbox.AggregateOf(e.Envelope)
			}
		}
		s.settler.update(o)
	}
}

// holdsBack reports whether later events of e's aggregate wait for e's
// outcome: the subscription is ordered and e has an aggregate.
func (sub *subscription) holdsBack(e *outbox.Event) bool {
	return sub.s.cfg.Ordered && e.AggregateID != ""
}

// logDead logs that e is DEAD after its attempt that just ended. An
// ordered event holds back the later events of its aggregate, which the
// fields say, so that an operator knows a replay or a purge is awaited.
func (sub *subscription) logDead(msg string, e *outbox.Event, err error) {
	fields := watermill.LogFields{"event_id": e.ID, "topic": sub.topic, "attempts": e.Attempts + 1}
	if sub.holdsBack(e) {
		fields["aggregate_type"], fields["aggregate_id"] = string(e.AggregateType), e.AggregateID
		fields["holds_back_aggregate"] = true
	}
	sub.s.cfg.Logger.Error(msg, err, fields)
}

// handOver gives msg to the subscription's reader and reports whether it
// took it. A reader busy with other messages can keep it waiting: once
// half of the event's claim is gone, msg is left to the next claim, as an
// event that waited that long in a queue is; when the subscription stops,
// the event is released.
func (sub *subscription) handOver(msg *message.Message, item *queued, wait *time.Timer) bool {
	e := &item.event
	select {
	case sub.out <- msg:
		return true
	default:
	}
	// The clock decides, not the timer: a timer's time may be stale (one
	// GODEBUG=asynctimerchan=1 kept from before its Reset) or disagree
	// with the clock (a step back); either way the wait goes on for the
	// rest.
	for {
		var halfSpent <-chan time.Time
		if !e.LockedUntil.IsZero() {
			left := sub.halfSpent(e).Sub(sub.s.cfg.Clock.Now())
			if left <= 0 {
				sub.s.cfg.Logger.Info("outbox claim half spent waiting for the subscription's reader: event left to the next claim (raise LockTimeout, or read the channel concurrently, as a Watermill router does)",
					watermill.LogFields{"event_id": e.ID, "topic": sub.topic, "source": item.source, "locked_until": e.LockedUntil})
				return false
			}
			// Left running afterwards: the next Reset moves it, which
			// costs less than a Stop and a Reset.
			wait.Reset(left)
			halfSpent = wait.C
		}
		select {
		case sub.out <- msg:
			return true
		case <-sub.stopped.Done():
			sub.s.settler.release([]releaseItem{{id: e.ID, topic: sub.topic}})
			return false
		case <-halfSpent:
		}
	}
}

// answer waits for the handler to ack or nack msg and reports which, or
// that it did neither before abandon closed (the subscription gave up on
// its handlers). An Ack given as abandon closes counts: a select would
// pick between them at random, and a release would deliver an event its
// handler acked again. A Nack seen once abandon closed does not: giving up
// ends the message's context, which handlers answer with a Nack, and that
// must not spend an attempt (nor make the event DEAD) for a shutdown.
func answer(msg *message.Message, abandon <-chan struct{}) (acked, answered bool) {
	select {
	case <-msg.Acked():
		return true, true
	case <-msg.Nacked():
		return false, !isDone(abandon)
	case <-abandon:
	}
	select {
	case <-msg.Acked():
		return true, true
	default:
		return false, false
	}
}

// isDone reports, without waiting, whether ch, a done channel, is closed.
func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
