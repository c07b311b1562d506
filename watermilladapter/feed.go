package watermilladapter

import (
	"context"
	"hash/maphash"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// Log mode (SubscriberConfig.Feed). The feed streams committed
// transactions in commit order; the Subscriber puts each event on its
// topic's subscription, where workers deliver it as they do claimed ones,
// and tells the feed a transaction is settled once every outcome of it is
// recorded, or the event is left in the table for a claim. The table is
// split between the feed and the claims by the claims' written-before
// bound: a claim takes a NEW event due at its write only once the feed
// has said the rest of its stream no longer holds it (Covered), and
// RETRY and scheduled events at any time. The hot path is off: the feed
// delivers every process's events in commit order.
//
// Ordered, the events of an aggregate go to one worker's lane in commit
// order, so that each is handed over once the one before is acked,
// whatever WorkerCount is. A failed event parks its aggregate: the
// events after it, streamed or still in the lane, are left to the
// ordered claims, which hold them back until it is DONE and then take
// them by the aggregate's name, until the stream takes the aggregate
// back (see unpark). A feed that begins to read parks the aggregates
// that a reader before it left unfinished (see parkUnfinished, and order
// for both).

// feedRestart is how long the Subscriber waits before calling a feed's
// Stream again after it returned an error.
const feedRestart = 5 * time.Second

// feedTx counts the events of a streamed transaction not yet settled.
type feedTx struct {
	left    atomic.Int64
	settled func()
}

// settle settles one event of t: the last one settles t. nil-safe, for
// events that did not come from a feed.
func (t *feedTx) settle() {
	if t != nil && t.left.Add(-1) == 0 {
		t.settled()
	}
}

// feedReader is the FeedHandler of a Subscriber.
type feedReader struct {
	s       *Subscriber
	seed    maphash.Seed
	reading atomic.Bool
	covered atomic.Int64 // unix nanoseconds; 0 for nothing covered yet
	failed  atomic.Bool  // the feed gave up: claims take every event

	// Ordered: orderer reads and leases in the table, and seen holds the
	// aggregates each subscription has had streamed since the feed last
	// began to read (see order). seen is the feed goroutine's own.
	orderer outboxdriver.FeedOrderer
	seen    map[seenAggregate]struct{}

	subs []*subscription // Transaction's, reused: the subscription of each event
}

// seenAggregate is an aggregate streamed to a subscription.
type seenAggregate struct {
	sub       *subscription
	aggregate outboxdriver.Aggregate
}

// maxSeen bounds feedReader.seen: past it, the set starts again, and the
// aggregates streamed next are looked up again.
const maxSeen = 100_000

var _ outboxdriver.FeedHandler = (*feedReader)(nil)

// run streams the feed until the Subscriber closes. A feed that returns
// an error cannot stream: the relay then claims every event, as a relay
// without a feed does, and tries the feed again after feedRestart.
func (f *feedReader) run(ctx context.Context) {
	cfg := &f.s.cfg
	for {
		err := cfg.Feed.Stream(ctx, f)
		f.reading.Store(false)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			f.failed.Store(true)
			cfg.Logger.Error("outbox: the log feed cannot stream; claiming every event until it can",
				slog.Any("error", err))
			cfg.Metrics.StoreError("", "feed")
		}
		if !sleep(cfg.Clock, feedRestart, ctx.Done()) {
			return
		}
	}
}

// Reading implements [outboxdriver.FeedHandler]. A feed that begins to
// read forgets the aggregates it has seen: while it did not read, another
// reader may have left their events unfinished.
func (f *feedReader) Reading(reading bool) {
	f.reading.Store(reading)
	if reading {
		f.failed.Store(false)
		clear(f.seen)
	}
}

// Covered implements [outboxdriver.FeedHandler].
func (f *feedReader) Covered(t time.Time) {
	n := t.UnixNano()
	for {
		old := f.covered.Load()
		if n <= old || f.covered.CompareAndSwap(old, n) {
			return
		}
	}
}

// createdBefore is the claims' written-before bound for NEW events due at
// their write, by the feed: what it covered, or all of them once it gave
// up. Zero (no such event) before it covered anything.
func (f *feedReader) createdBefore(now time.Time) time.Time {
	if f.failed.Load() {
		return now
	}
	n := f.covered.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Transaction implements [outboxdriver.FeedHandler]: it queues each event
// of tx on its topic's subscription, waiting for room, and settles at once
// those left to claims.
func (f *feedReader) Transaction(ctx context.Context, tx outboxdriver.FeedTransaction) error {
	t := &feedTx{settled: tx.Settled}
	t.left.Store(int64(len(tx.Events)) + 1) // one for the loop, settled at its end
	defer t.settle()
	// Latency counts from the commit, by a clock that may not agree with
	// this one.
	since := f.s.cfg.Clock.Now()
	if tx.CommitTime.Before(since) {
		since = tx.CommitTime
	}
	subs := f.subs[:0]
	for i := range tx.Events {
		sub, closed := f.s.feedSubscription(&tx.Events[i])
		if closed {
			// Not settled: the next run streams it again.
			<-ctx.Done()
			return ctx.Err()
		}
		subs = append(subs, sub)
	}
	f.subs = subs
	leased := f.order(ctx, tx.Events, subs)
	for i := range tx.Events {
		r, sub := &tx.Events[i], subs[i]
		if row, ok := leased[i]; ok {
			item := logItem(row, since, t)
			item.leased = true
			if err := sub.offerLog(ctx, f.lane(sub, r), item); err != nil {
				return err
			}
			continue
		}
		switch {
		case sub == nil:
			t.settle() // the table keeps it for a claim
			continue
		case !feedDelivers(r):
			// Scheduled for later: a claim takes it when it is due, and,
			// ordered, the events after it of its aggregate.
			sub.parkAfterFailure(r)
			t.settle()
			continue
		}
		if err := sub.offerLog(ctx, f.lane(sub, r), logItem(*r, since, t)); err != nil {
			return err
		}
	}
	return nil
}

// order keeps, ordered, each aggregate of events behind its earlier
// events, looking at the aggregate's first event in events that the feed
// delivers (its head here), and returns the heads it leased by their
// place in events. One statement per subscription asks of the heads of
// the aggregates it has parked whether the claims have caught up (see
// unpark), another of those first streamed to it since the feed began to
// read whether an earlier event is unfinished (see parkUnfinished); no
// aggregate is asked both.
func (f *feedReader) order(ctx context.Context, events []outboxdriver.Row, subs []*subscription) map[int]outboxdriver.Row {
	if f.orderer == nil {
		return nil
	}
	var parked, unseen map[*subscription][]int
	taken := make(map[seenAggregate]bool)
	for i := range events {
		r, sub := &events[i], subs[i]
		if sub == nil || r.AggregateID == "" || !feedDelivers(r) {
			continue
		}
		key := seenAggregate{sub: sub, aggregate: rowAggregate(r)}
		if taken[key] {
			continue // not the aggregate's head here
		}
		taken[key] = true
		switch _, seen := f.seen[key]; {
		case sub.isParked(r):
			parked = addPlace(parked, sub, i)
		case !seen:
			if f.seen == nil || len(f.seen) >= maxSeen {
				f.seen = make(map[seenAggregate]struct{})
			}
			f.seen[key] = struct{}{}
			unseen = addPlace(unseen, sub, i)
		}
	}
	for sub, places := range unseen {
		f.parkUnfinished(ctx, sub, rowsAt(events, places))
	}
	var leased map[int]outboxdriver.Row
	for sub, places := range parked {
		leased = f.unpark(ctx, sub, events, places, leased)
	}
	return leased
}

func addPlace(m map[*subscription][]int, sub *subscription, i int) map[*subscription][]int {
	if m == nil {
		m = make(map[*subscription][]int)
	}
	m[sub] = append(m[sub], i)
	return m
}

func rowsAt(events []outboxdriver.Row, places []int) []outboxdriver.Row {
	rows := make([]outboxdriver.Row, len(places))
	for k, i := range places {
		rows[k] = events[i]
	}
	return rows
}

// parkUnfinished parks the aggregates of heads, events streamed to sub,
// whose earlier event is unfinished in the table: failed, scheduled, or
// left to claims by a reader of the log before this one (its transaction
// behind the slot's confirmed position, so that no stream brings it
// again). The later events follow it through the claims instead of
// overtaking it. When the statement fails, they are parked all the same,
// which keeps the order at the claims' pace.
func (f *feedReader) parkUnfinished(ctx context.Context, sub *subscription, heads []outboxdriver.Row) {
	unfinished, err := f.orderer.UnfinishedBefore(ctx, outboxdriver.UnfinishedBeforeParams{Topic: sub.topic, Rows: heads})
	if err != nil {
		f.s.cfg.Logger.Warn("outbox: cannot tell whether streamed aggregates have unfinished events; leaving them to ordered claims",
			slog.String("topic", sub.topic), slog.Int("aggregates", len(heads)), slog.Any("error", err))
		f.s.cfg.Metrics.StoreError(sub.topic, "unfinished")
	}
	for i := range heads {
		if err != nil || unfinished[i] {
			sub.park(heads[i].Seq, rowAggregate(&heads[i]))
		}
	}
}

// unpark takes back to the stream the aggregates sub has parked whose
// heads (at places in events) the claims have caught up with: every
// earlier event of the aggregate is DONE. It leases each such head, which
// keeps the claims off it while it is delivered from the stream, unparks
// its aggregate, and adds the leased rows to leased by their place in
// events. The aggregate's later events follow from the stream; a claim of
// it that returns after this hands its events back (see keepParked). The
// others stay parked; so do all when the statement fails, to be tried
// again at their next streamed event.
func (f *feedReader) unpark(ctx context.Context, sub *subscription, events []outboxdriver.Row, places []int, leased map[int]outboxdriver.Row) map[int]outboxdriver.Row {
	ids := make([]string, len(places))
	at := make(map[string]int, len(places))
	for k, i := range places {
		ids[k], at[events[i].ID] = events[i].ID, i
	}
	now := f.s.cfg.Clock.Now()
	rows, err := f.orderer.LeaseFirst(ctx, outboxdriver.LeaseFirstParams{Owner: f.s.owner, Topic: sub.topic, IDs: ids,
		Now: now, LockedUntil: now.Add(f.s.cfg.LockTimeout)})
	if err != nil {
		f.s.cfg.Logger.Warn("outbox: cannot take parked aggregates back to the stream; they stay with ordered claims",
			slog.String("topic", sub.topic), slog.Int("aggregates", len(ids)), slog.Any("error", err))
		f.s.cfg.Metrics.StoreError(sub.topic, "unfinished")
		return leased
	}
	for _, row := range rows {
		if leased == nil {
			leased = make(map[int]outboxdriver.Row)
		}
		leased[at[row.ID]] = row
		sub.unpark(rowAggregate(&row))
	}
	return leased
}

// feedDelivers reports whether the feed delivers r, rather than a claim:
// a NEW event due at its write.
func feedDelivers(r *outboxdriver.Row) bool {
	return r.Status == int16(outbox.StatusNew) && !r.AvailableAt.After(r.CreatedAt)
}

// lane returns the queue r goes to: ordered, its aggregate's worker lane
// (an event without an aggregate id is an aggregate of its own), else the
// subscription's shared queue.
func (f *feedReader) lane(sub *subscription, r *outboxdriver.Row) chan queued {
	if sub.lanes == nil {
		return sub.hot
	}
	var h maphash.Hash
	h.SetSeed(f.seed)
	if r.AggregateID == "" {
		h.WriteString(r.ID)
	} else {
		h.WriteString(r.AggregateType)
		h.WriteByte(0)
		h.WriteString(r.AggregateID)
	}
	return sub.lanes[h.Sum64()%uint64(len(sub.lanes))]
}

// logItem is r, streamed at since, as a queue holds it.
func logItem(r outboxdriver.Row, since time.Time, t *feedTx) queued {
	headers, malformed := codec.DecodeHeaders(r.Headers)
	if r.Malformed == nil {
		r.Malformed = malformed
	}
	return queued{row: r, headers: headers, source: SourceLog, since: since, feed: t}
}

// maxUnserved bounds the aggregates of each topic that Subscriber.unserved
// remembers: past it, a subscription made later for the topic does not
// know every aggregate whose events went to claims, and one of them may
// have an event delivered from the feed before an earlier one is claimed.
const maxUnserved = 10_000

// feedSubscription returns the subscription that streamed event r goes
// to, round robin among its topic's, or nil when none serves the topic,
// or reports that the Subscriber is closing.
// Ordered, the aggregate of an event no subscription serves is
// remembered: the event is left to claims, and a subscription made later
// for its topic parks the aggregate, so that its later events follow it
// through claims rather than overtake it.
func (s *Subscriber) feedSubscription(r *outboxdriver.Row) (sub *subscription, closed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, true
	}
	subs := s.subs[r.Topic]
	if len(subs) == 0 {
		if s.cfg.Ordered && r.AggregateID != "" && len(s.unserved[r.Topic]) < maxUnserved {
			if s.unserved[r.Topic] == nil {
				s.unserved[r.Topic] = make(map[outboxdriver.Aggregate]struct{})
			}
			s.unserved[r.Topic][rowAggregate(r)] = struct{}{}
		}
		return nil, false
	}
	i := s.next[r.Topic]
	s.next[r.Topic] = i + 1
	return subs[i%len(subs)], false
}

// startFeed streams the feed until stopFeed, which Close calls once the
// settler has recorded its last outcomes.
func (s *Subscriber) startFeed() {
	ctx, stop := context.WithCancel(context.Background())
	s.stopFeed, s.feedDone = stop, make(chan struct{})
	go func() {
		defer close(s.feedDone)
		s.feed.run(ctx)
	}()
	if _, nop := s.cfg.Metrics.(nopMetrics); !nop && s.slots != nil {
		s.wg.Go(s.watchSlots)
	}
}

// watchSlots reports the log slots every BacklogInterval until Close.
func (s *Subscriber) watchSlots() {
	timer := s.cfg.Clock.NewTimer(s.cfg.BacklogInterval)
	defer timer.Stop()
	for {
		s.reportSlots(s.stopped)
		select {
		case <-s.stopped.Done():
			return
		case <-timer.C():
			timer.Reset(s.cfg.BacklogInterval)
		}
	}
}

// offerLog queues a streamed event on lane, waiting for room, unless its
// aggregate is parked; when the subscription stops first, it drops the
// event (see dropStreamed).
func (sub *subscription) offerLog(ctx context.Context, lane chan queued, item queued) error {
	if sub.parked(&item.row) {
		item.feed.settle()
		return nil
	}
	select {
	case lane <- item:
		return nil
	case <-sub.stopped.Done():
		sub.dropStreamed(item)
		return nil
	case <-ctx.Done():
		sub.dropStreamed(item)
		return ctx.Err()
	}
}

// hotDepth is how many events wait on the hot queue, or on the lanes of
// an ordered subscription in log mode.
func (sub *subscription) hotDepth() int {
	n := len(sub.hot)
	for _, lane := range sub.lanes {
		n += len(lane)
	}
	return n
}

// parkedAggregates are an ordered subscription's aggregates whose events
// the feed leaves to claims: one of them failed, and those after it must
// wait for it. Each has the highest seq left to the claims so far, which
// bounds their claims of it: the events the feed has not streamed yet are
// the feed's to take back (see feedReader.unpark).
type parkedAggregates struct {
	mu  sync.Mutex
	set map[outboxdriver.Aggregate]int64
}

// parked reports whether e's aggregate is parked. When it is and e comes
// from the feed, e is left to the claims, and the claim of the aggregate
// is asked for by name: e may be its next event.
func (sub *subscription) parked(e *outboxdriver.Row) bool {
	if sub.lanes == nil || e.AggregateID == "" || !sub.leave(e) {
		return false
	}
	sub.claimNext(rowAggregate(e))
	return true
}

// leave raises the bound of e's aggregate to e, and reports whether the
// aggregate is parked; it does nothing when it is not.
func (sub *subscription) leave(e *outboxdriver.Row) bool {
	sub.parkedSet.mu.Lock()
	defer sub.parkedSet.mu.Unlock()
	a := rowAggregate(e)
	bound, parked := sub.parkedSet.set[a]
	if parked {
		sub.parkedSet.set[a] = max(bound, seqBound(e.Seq))
	}
	return parked
}

// seqBound is the claims' bound that leaves them seq: no bound for a row
// whose seq was not read (0).
func seqBound(seq int64) int64 {
	if seq <= 0 {
		return math.MaxInt64
	}
	return seq
}

// isParked reports whether e's aggregate is parked.
func (sub *subscription) isParked(e *outboxdriver.Row) bool {
	sub.parkedSet.mu.Lock()
	defer sub.parkedSet.mu.Unlock()
	_, parked := sub.parkedSet.set[rowAggregate(e)]
	return parked
}

// park leaves the rest of aggregates to the ordered claims, which may
// take their events up to seq bound: an event of theirs failed, or was
// left to claims while no subscription served it.
func (sub *subscription) park(bound int64, aggregates ...outboxdriver.Aggregate) {
	sub.parkedSet.mu.Lock()
	defer sub.parkedSet.mu.Unlock()
	if sub.parkedSet.set == nil {
		sub.parkedSet.set = make(map[outboxdriver.Aggregate]int64)
	}
	for _, a := range aggregates {
		sub.parkedSet.set[a] = max(sub.parkedSet.set[a], seqBound(bound))
	}
}

// claimBounds returns the bounds of the aggregates named, as
// ClaimParams.AggregateBounds has them: nil unless in ordered log mode,
// and no bound for one no longer parked (keepParked hands its events
// back).
func (sub *subscription) claimBounds(named []outboxdriver.Aggregate) []int64 {
	if sub.lanes == nil || len(named) == 0 {
		return nil
	}
	sub.parkedSet.mu.Lock()
	defer sub.parkedSet.mu.Unlock()
	bounds := make([]int64, len(named))
	for i, a := range named {
		bound, parked := sub.parkedSet.set[a]
		if !parked {
			bound = math.MaxInt64
		}
		bounds[i] = bound
	}
	return bounds
}

// unpark returns aggregate to the stream.
func (sub *subscription) unpark(aggregate outboxdriver.Aggregate) {
	sub.parkedSet.mu.Lock()
	defer sub.parkedSet.mu.Unlock()
	delete(sub.parkedSet.set, aggregate)
}

// keepParked returns the rows of rows whose aggregate is parked, and
// hands the others back: in ordered log mode, a claim that names
// aggregates is for parked ones, and one the feed took back meanwhile
// (see feedReader.unpark) has its events delivered from the stream.
func (sub *subscription) keepParked(rows []outboxdriver.Row) []outboxdriver.Row {
	var back []outboxdriver.Row
	kept := rows[:0]
	for _, r := range rows {
		if sub.isParked(&r) {
			kept = append(kept, r)
		} else {
			back = append(back, r)
		}
	}
	sub.releaseEvents(back)
	return kept
}

// itemOutcome is the outcome u of item: of a streamed event, settling its
// transaction once recorded, and, unleased, with the updated_at the feed
// read.
func itemOutcome(u update, item *queued) outcome {
	o := outcome{update: u, feed: item.feed, unleased: item.feed != nil && !item.leased}
	if o.unleased {
		o.streamed = item.row.UpdatedAt
	}
	return o
}
