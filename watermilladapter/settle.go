package watermilladapter

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// maxSettleBatch caps the outcomes recorded by one statement.
const maxSettleBatch = 500

// settleLinger is how long the settler waits, after the first outcome of a
// batch, for more to join it. Every statement is a transaction the database
// pays for in CPU and WAL whatever its size: under a steady stream of
// hot-path events, one statement per outcome would cost about as much as
// the business transactions that wrote the events, and a shorter linger
// costs more CPU per event (bench/README.md has the write path's figures).
// Delivery does not wait for it; only the row's DONE does, and a flush (a
// subscription closing) or the DONE of an ordered event cuts it short.
const settleLinger = 50 * time.Millisecond

// A statement is given settleTimeout while the subscriber runs. A failed
// flush is retried after settleRetry, doubling up to settleRetryMax, for
// as long as the subscriber runs: a database that is down for minutes must
// not leave claims held until their leases end. Once Close begins, the
// settler keeps trying until settleGiveUp after that, for all its
// statements together (a statement sent before is cut off then too), and
// each statement left after that gets one attempt of at most
// settleLastChance: Close then ends in about settleGiveUp however much is
// queued. Outcomes not recorded are not lost: the leases expire and the
// events are delivered again.
const (
	settleTimeout    = 10 * time.Second
	settleRetry      = 50 * time.Millisecond
	settleRetryMax   = 2 * time.Second
	settleGiveUp     = 10 * time.Second
	settleLastChance = time.Second
)

// maxQueuedReleases bounds the claims waiting to be handed back while the
// database does not answer the settler: each is a few dozen bytes, and past
// the bound a release is dropped, its events left to the cold path when
// their lease ends.
const maxQueuedReleases = 100_000

// releaseItem is a claim to hand back, and the topic to wake for it.
type releaseItem struct{ id, topic string }

// outcome is a status update to record and the subscription to wake for
// it: for a RETRY or a deferral when the event is due again, for the DONE
// of an ordered event at once, since the next event of its aggregate is
// due then. It is told once the update is recorded: a claim before that
// would find the event still held by this relay (or, ordered, still
// holding back its aggregate), and would wait for a poll.
type outcome struct {
	update    update
	wake      *subscription
	aggregate outboxdriver.Aggregate // of an ordered event: whose next event a DONE frees, or which a retry names
	feed      *feedTx                // settled once the update is recorded: the event came from a feed
	unleased  bool                   // streamed, and not leased: recorded from no owner
	// streamed is the updated_at of a streamed event as the feed read it
	// (zero for others), and rechecks how many times its update was found
	// not recorded (see recheckStreamed).
	streamed time.Time
	rechecks int
}

// freesNext reports whether o is the DONE of an ordered event, which the
// next event of its aggregate waits for.
func (o outcome) freesNext() bool { return o.wake != nil && o.update.nextAt.IsZero() }

// settler records outcomes for every worker of a Subscriber: whatever has
// queued while the previous statement ran, or arrives within settleLinger,
// goes into the next one.
type settler struct {
	driver     outboxdriver.Executor
	clock      outbox.Clock
	owner      string
	logger     *slog.Logger
	storeError func(operation string) // counts failed statements for Metrics
	wake       func(topics ...string)

	updates  chan outcome
	statuses []update // owned by run: the batch being recorded
	linger   time.Duration
	giveUp   time.Duration
	cut      chan struct{}      // signalled when updates is half full or a flush is asked for: end the linger
	hurried  chan struct{}      // signalled by hurry: end a failed statement's pause too
	released chan struct{}      // signalled when releases has items
	flushes  chan chan struct{} // unbuffered: a request sent is a request taken
	stopped  context.Context    // ended by stop: failing flushes give up
	stopNow  context.CancelFunc
	stopAt   time.Time // set by stop before it ends stopped
	quit     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	quitOnce sync.Once

	// Owned by run: how many outcomes and releases were given up.
	notRecorded int

	// Claims to hand back queue in a list, not a channel: release is called
	// after a business commit, in the caller's goroutine, and must not wait
	// for room while a statement is slow. closed is set before run drains
	// for the last time: a release queued while it is false is drained.
	mu       sync.Mutex
	releases []releaseItem
	dropped  int // releases beyond maxQueuedReleases
	closed   bool
}

func newSettler(driver outboxdriver.Executor, clock outbox.Clock, owner string, logger *slog.Logger, metrics outbox.Metrics, wake func(...string)) *settler {
	st := &settler{
		driver:     driver,
		clock:      clock,
		owner:      owner,
		logger:     logger,
		storeError: func(operation string) { metrics.StoreError("", operation) },
		wake:       wake,
		updates:    make(chan outcome, maxSettleBatch),
		linger:     settleLinger,
		giveUp:     settleGiveUp,
		cut:        make(chan struct{}, 1),
		hurried:    make(chan struct{}, 1),
		released:   make(chan struct{}, 1),
		flushes:    make(chan chan struct{}),
		quit:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	st.stopped, st.stopNow = context.WithCancel(context.Background())
	go st.run()
	return st
}

// update queues an outcome (see outcome; wake nil for none); it blocks
// while the queue is full, which slows
// the workers down to what the database records. The DONE of an ordered
// event ends the linger: the next event of its aggregate waits for it, and
// a batch still gathers what queues while the statement before runs.
// After close it drops the outcome: the lease expires and the event is
// delivered again.
func (st *settler) update(o outcome) {
	select {
	case st.updates <- o:
		if len(st.updates) >= maxSettleBatch/2 || o.freesNext() {
			signal(st.cut)
		}
	case <-st.done:
	}
}

// release queues claims to hand back; it never waits for the database.
// Past maxQueuedReleases queued, it drops them: their leases end and the
// events are delivered then. After close, it releases them itself, in one
// attempt: a transaction that commits after Close still hands the events
// it wrote claimed to the other relays at once, rather than at the end of
// their lease.
func (st *settler) release(items []releaseItem) {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		st.releaseNow(items)
		return
	}
	full := len(st.releases)+len(items) > maxQueuedReleases
	if full {
		st.dropped += len(items)
	} else {
		st.releases = append(st.releases, items...)
	}
	st.mu.Unlock()
	if full {
		st.logger.Error("outbox: too many claims waiting to be released; they will expire and the events be delivered then",
			slog.Int("events", len(items)), slog.Int("queued", maxQueuedReleases))
		return
	}
	signal(st.released)
}

// releaseNow releases items in one attempt, for a release after close.
func (st *settler) releaseNow(items []releaseItem) {
	ctx, cancel := withTimeout(context.Background(), st.clock, settleLastChance)
	defer cancel()
	if err := st.releaseOp(items)(ctx); err != nil {
		st.storeError("give_up")
		st.logger.Error("outbox: cannot release claims after Close; they will expire and the events be delivered again",
			slog.Int("events", len(items)), slog.Any("error", err))
		return
	}
	st.wake(releasedTopics(items)...)
}

// takeReleases returns the queued releases, to be written in one
// statement: one each would cost the database a transaction per committed
// write that found the hot path full, and at Close, with the database not
// answering, settleLastChance per release.
func (st *settler) takeReleases() []releaseItem {
	st.mu.Lock()
	defer st.mu.Unlock()
	items := st.releases
	st.releases = nil
	return items
}

// flush returns once every outcome and release queued before the call is
// recorded, or given up on once Close began. A subscription calls it
// before closing its channel: a Watermill router's Close returns when the
// channels are closed, and the application closes the database next.
func (st *settler) flush() {
	signal(st.cut)
	done := make(chan struct{})
	select {
	case st.flushes <- done:
		<-done
	case <-st.done:
	}
}

func (st *settler) run() {
	defer close(st.done)
	batch := make([]outcome, 0, maxSettleBatch)
	for {
		select {
		case u := <-st.updates:
			st.flushUpdates(st.gather(append(batch[:0], u)))
		case <-st.released:
			st.flushReleases(st.takeReleases())
		case flushed := <-st.flushes:
			// Only what is queued now: while other subscriptions' workers
			// wait for room, the queue refills as fast as it drains.
			st.drain(len(st.updates))
			close(flushed)
			if len(st.updates) == 0 {
				select { // a signal no linger took: the queue is empty now
				case <-st.cut:
				default:
				}
			}
		case <-st.quit:
			st.drain(len(st.updates)) // every worker has stopped: nothing more comes
			return
		}
	}
}

// gather adds to batch the outcomes that arrive within the linger, up to
// maxSettleBatch. It sleeps through the linger rather than wake for each
// outcome, unless the queue fills up, a flush is requested or the settler
// closes. Releases are written meanwhile: other relays wait for them to
// claim the events.
func (st *settler) gather(batch []outcome) []outcome {
	linger := st.clock.NewTimer(st.linger)
	defer linger.Stop()
	for {
		select {
		case <-st.released:
			st.flushReleases(st.takeReleases())
			continue
		case <-linger.C():
		case <-st.cut:
		case <-st.quit:
		}
		break
	}
	for len(batch) < maxSettleBatch {
		select {
		case u := <-st.updates:
			batch = append(batch, u)
		default:
			return batch
		}
	}
	return batch
}

// drain records the queued releases in one statement and the next n
// queued outcomes in batches like run does.
func (st *settler) drain(n int) {
	st.flushReleases(st.takeReleases())
	var batch []outcome
	for range n {
		if batch = append(batch, <-st.updates); len(batch) == maxSettleBatch {
			st.flushUpdates(batch)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		st.flushUpdates(batch)
	}
}

func (st *settler) flushUpdates(batch []outcome) {
	st.statuses = st.statuses[:0]
	for _, o := range batch {
		u := o.update
		u.unleased = o.unleased
		st.statuses = append(st.statuses, u)
	}
	var changed, sent int64
	recorded := st.retry("record outcomes", len(batch), func(ctx context.Context) (err error) {
		changed, sent, err = recordUpdates(ctx, st.driver, st.owner, st.clock.Now(), st.statuses)
		return err
	})
	if !recorded {
		return
	}
	for _, o := range batch {
		if changed < sent && st.notRecordedYet(&o) {
			continue
		}
		o.feed.settle()
		switch {
		case o.freesNext():
			o.wake.claimNext(o.aggregate)
		case o.wake != nil:
			o.wake.scheduleClaim(o.update.nextAt, o.aggregate)
		}
	}
}

// visibilityWindow is how soon after its commit a streamed event's
// outcome may find its row not yet visible (see notRecordedYet), and
// maxRechecks how many times such an outcome is recorded again.
const (
	visibilityWindow = 5 * time.Second
	maxRechecks      = 10
)

// notRecordedYet reports whether o, the outcome of a recent event from a
// feed in a batch that changed fewer rows than it sent updates for, did
// not change its row, and has it recorded again after settleRetry. A
// feed gets a transaction once its commit is in the log, a moment before
// other sessions see it: an outcome recorded at once may find no row.
// Most batches that change fewer rows hold events delivered twice, whose
// rows another outcome changed already; the rows of those read
// otherwise than as the feed streamed them.
func (st *settler) notRecordedYet(o *outcome) bool {
	if !o.unleased || o.rechecks >= maxRechecks || st.clock.Now().Sub(o.streamed) > visibilityWindow {
		return false
	}
	ctx, cancel := st.attemptContext()
	row, found, err := st.driver.Get(ctx, o.update.id)
	cancel()
	if err == nil && found && (row.Status != int16(outbox.StatusNew) || !row.UpdatedAt.Equal(o.streamed)) {
		return false
	}
	again := *o
	again.rechecks++
	go func() {
		if sleep(st.clock, settleRetry, st.done) {
			st.update(again)
		}
	}()
	return true
}

func (st *settler) flushReleases(items []releaseItem) {
	if len(items) == 0 {
		return
	}
	if !st.retry("release claims", len(items), st.releaseOp(items)) {
		return
	}
	st.wake(releasedTopics(items)...)
}

// releasedTopics returns the distinct topics of items.
func releasedTopics(items []releaseItem) []string {
	var topics []string
	for _, it := range items {
		if !slices.Contains(topics, it.topic) {
			topics = append(topics, it.topic)
		}
	}
	return topics
}

func (st *settler) releaseOp(items []releaseItem) func(ctx context.Context) error {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.id
	}
	return func(ctx context.Context) error {
		_, err := st.driver.Release(ctx, outboxdriver.ReleaseParams{Owner: st.owner, IDs: ids})
		return err
	}
}

// retry runs op, which records n outcomes or releases, until it succeeds
// or, once the settler is stopping, the settler gives up (see
// settleGiveUp). It reports whether op succeeded.
func (st *settler) retry(what string, n int, op func(ctx context.Context) error) bool {
	pause := settleRetry
	for {
		ctx, cancel := st.attemptContext()
		err := op(ctx)
		cancel()
		if err == nil {
			return true
		}
		st.storeError("record")
		if st.gaveUp() {
			st.storeError("give_up")
			st.logger.Error("outbox: giving up; the claims will expire and the events be delivered again",
				slog.String("operation", what), slog.Int("events", n), slog.Any("error", err))
			st.notRecorded += n
			return false
		}
		// Every failed attempt is a warning; giving up is the error.
		st.logger.Warn("outbox: recording failed; retrying after the pause",
			slog.String("operation", what), slog.Int("events", n), slog.Duration("pause", pause), slog.Any("error", err))
		sleep(st.clock, pause, st.hurried)
		pause = min(2*pause, settleRetryMax)
	}
}

// attemptContext bounds one statement: by settleTimeout while the
// subscriber runs, and by the give-up deadline once Close began, which
// cuts off a statement sent before too; near or past the deadline, by
// settleLastChance.
func (st *settler) attemptContext() (context.Context, context.CancelFunc) {
	if !st.isStopping() {
		return boundedAfterStop(st.stopped, st.clock, settleTimeout, st.giveUp)
	}
	return withTimeout(context.Background(), st.clock, max(st.stopAt.Add(st.giveUp).Sub(st.clock.Now()), settleLastChance))
}

// gaveUp reports whether the settler's deadline for failing statements,
// settleGiveUp after Close began, has passed.
func (st *settler) gaveUp() bool {
	return st.isStopping() && !st.clock.Now().Before(st.stopAt.Add(st.giveUp))
}

func (st *settler) isStopping() bool { return st.stopped.Err() != nil }

// stop tells the settler that its subscriber is closing: it still records
// what comes, but a statement that keeps failing is given up after
// settleGiveUp, so that the subscriptions' final flushes, and Close with
// them, end while the database is down.
func (st *settler) stop() {
	st.stopOnce.Do(func() {
		st.stopAt = st.clock.Now()
		st.stopNow()
	})
}

// close records everything queued and stops. It returns [ErrNotRecorded]
// if it gave up on any of it.
func (st *settler) close() error {
	st.stop()
	st.mu.Lock()
	st.closed = true
	st.mu.Unlock()
	st.quitOnce.Do(func() { close(st.quit) })
	<-st.done
	st.mu.Lock()
	notRecorded := st.notRecorded + st.dropped
	st.mu.Unlock()
	if notRecorded > 0 {
		return fmt.Errorf("%w: %d outcomes and releases", ErrNotRecorded, notRecorded)
	}
	return nil
}
