package watermilladapter

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// A subscription runs these goroutines: the claimer (claimer.go), the
// cold path, which claims due events onto the cold queue; WorkerCount
// workers (worker.go), which take events from the hot and cold queues,
// hand them to the output channel and turn their Ack or Nack into an
// outcome for the Subscriber's settler (settle.go); and, with Metrics,
// the observer (observe.go). The writer's after-commit hook fills the hot
// queue (Subscriber.DeliverHot). run starts them and, when the
// subscription stops, drains it.

// queued is an event waiting for a worker.
type queued struct {
	row     outboxdriver.Row
	headers map[string]string // decoded from row.Headers, or as written
	source  string
	since   time.Time // when it became due (commit, or a later due time), for latency
	run     []queued  // the rest of an ordered run whose head this is (see run.go)
	feed    *feedTx   // the streamed transaction of an event from the feed (see feed.go)
	// leased says that the feed leased this streamed event (see
	// feedReader.unpark): its outcome is recorded as a claimed one's.
	leased bool
}

// subscription relays one topic to one output channel.
type subscription struct {
	s     *Subscriber
	topic string
	out   chan *message.Message

	hot, cold chan queued
	// lanes, ordered in log mode, are the workers' own queues of streamed
	// events, one per worker, in place of hot (see feed.go).
	lanes     []chan queued
	parkedSet parkedAggregates
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

	held atomic.Int64 // events of runs claimed and not yet taken by a worker or released

	mu       sync.Mutex
	claimAts []claimTime                         // when to claim, earliest first: retries recorded, commits too recent for a claim
	next     map[outboxdriver.Aggregate]struct{} // ordered aggregates with an event that may have become due
}

func newSubscription(s *Subscriber, topic string) *subscription {
	abandon, cancel := context.WithCancel(context.Background())
	stopped, stop := context.WithCancel(context.Background())
	sub := &subscription{
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
	if s.cfg.Feed != nil && s.cfg.Ordered {
		sub.lanes = make([]chan queued, s.cfg.WorkerCount)
		for i := range sub.lanes {
			sub.lanes[i] = make(chan queued, max(1, s.cfg.HotQueueCapacity/s.cfg.WorkerCount))
		}
	}
	return sub
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
// whatever WakeCooldown says: the DONE of the ordered event before it (the
// last of its run) is recorded. An aggregate's runs follow one another at
// the pace of a claim and an outcome statement, not of the cooldown; the
// claim names
// the aggregates it is for, rather than walking every aggregate of the
// topic (see outboxdriver.ClaimParams.Aggregates).
func (sub *subscription) claimNext(aggregate outboxdriver.Aggregate) {
	sub.addNext(aggregate)
	signal(sub.nextCh)
}

// wakeFor is wake for an ordered event of aggregate this process
// committed: the claim it brings, at the end of WakeCooldown, names the
// aggregate rather than walk the topic.
func (sub *subscription) wakeFor(aggregate outboxdriver.Aggregate) {
	sub.addNext(aggregate)
	signal(sub.namedCh)
}

func (sub *subscription) addNext(aggregate outboxdriver.Aggregate) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.addNextLocked(aggregate)
}

func (sub *subscription) addNextLocked(aggregate outboxdriver.Aggregate) {
	if sub.next == nil {
		sub.next = make(map[outboxdriver.Aggregate]struct{})
	}
	sub.next[aggregate] = struct{}{}
}

// takeNext returns up to limit of the aggregates claimNext and wakeFor
// were told of, and forgets them; what is left signals nextCh, for a
// claim at once.
func (sub *subscription) takeNext(limit int) []outboxdriver.Aggregate {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if len(sub.next) == 0 {
		return nil
	}
	next := make([]outboxdriver.Aggregate, 0, min(limit, len(sub.next)))
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
	item := queued{row: hotRow(&e, claimedUntil), headers: e.Headers, source: SourceHot, since: committed}
	select {
	case sub.hot <- item:
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
	if _, discarded := sub.s.cfg.Metrics.(nopMetrics); !discarded {
		claimer.Go(sub.observe)
	}

	var workers sync.WaitGroup
	for i := range sub.s.cfg.WorkerCount {
		workers.Go(func() { sub.work(i) })
	}

	select {
	case <-ctx.Done():
		sub.stop()
	case <-sub.stopped.Done():
	}
	claimer.Wait()

	drained := make(chan struct{})
	go func() { workers.Wait(); close(drained) }()
	timer := sub.s.cfg.Clock.NewTimer(sub.s.cfg.DrainTimeout)
	defer timer.Stop()
	select {
	case <-drained:
	case <-timer.C():
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
	for _, q := range append([]chan queued{sub.hot, sub.cold}, sub.lanes...) {
		for {
			select {
			case item := <-q:
				if item.source == SourceLog {
					sub.dropStreamed(item)
					continue
				}
				if !sub.claimHalfSpent(&item.row) {
					left = append(left, releaseItem{id: item.row.ID, topic: sub.topic})
				}
				sub.releaseRun(item.run)
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

// dropStreamed gives up on a streamed event that is not delivered: the
// table keeps it NEW, for the stream of the relay's next run or a claim.
// While the Subscriber runs on, the feed goes past it; once it closes, the
// feed does not, so that the next run streams it again.
func (sub *subscription) dropStreamed(item queued) {
	if !sub.s.isClosed() {
		item.feed.settle()
	}
}

func (sub *subscription) releaseEvents(events []outboxdriver.Row) {
	if len(events) == 0 {
		return
	}
	items := make([]releaseItem, len(events))
	for i, e := range events {
		items[i] = releaseItem{id: e.ID, topic: sub.topic}
	}
	sub.s.settler.release(items)
}

// hotRow is the row of e, written claimed until claimedUntil, as a claim
// would read it back.
func hotRow(e *outbox.Envelope, claimedUntil time.Time) outboxdriver.Row {
	return outboxdriver.Row{ID: e.ID, Type: string(e.Type), Topic: e.Topic, AggregateType: string(e.AggregateType),
		AggregateID: e.AggregateID, TenantID: e.TenantID, Payload: e.Payload(), PayloadJSON: e.IsJSON(),
		Status: int16(outbox.StatusNew), OccurredAt: e.OccurredAt, LockedUntil: claimedUntil, IdempotencyKey: e.IdempotencyKey}
}
