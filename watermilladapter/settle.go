package watermilladapter

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// maxSettleBatch caps the outcomes recorded by one statement.
const maxSettleBatch = 500

// settleLinger is how long the settler waits, after the first outcome of a
// batch, for more to join it. Every statement is a transaction the database
// pays for in CPU and WAL whatever its size: under a steady stream of
// hot-path events, one statement per outcome would cost about as much as
// the business transactions that wrote the events, and one per 5 ms still
// cost about twice the CPU per event of one per 50 ms (in the bench's write
// path, 0.76× against 0.86× the raw insert rate). Delivery does not wait
// for it; only the row's DONE does, and a flush (a subscription closing)
// cuts it short.
const settleLinger = 50 * time.Millisecond

// A failed flush is retried after settleRetry, doubling up to
// settleRetryMax, for as long as the subscriber runs: a database that is
// down for minutes must not leave claims held until their leases end.
// Once Close begins, a flush keeps trying for settleGiveUp only. Outcomes not
// recorded are not lost: the leases expire and the events are delivered
// again.
const (
	settleRetry    = 50 * time.Millisecond
	settleRetryMax = 2 * time.Second
	settleGiveUp   = 10 * time.Second
)

// releaseItem is a claim to hand back, and the topic to wake for it.
type releaseItem struct{ id, topic string }

// settler records outcomes for every worker of a Subscriber: whatever has
// queued while the previous statement ran, or arrives within settleLinger,
// goes into the next one.
type settler struct {
	store    outbox.Store
	owner    string
	logger   watermill.LoggerAdapter
	released func(topics ...string)

	updates  chan outbox.StatusUpdate
	linger   time.Duration
	cut      chan struct{} // signalled when updates is half full or a flush is asked for: end the linger
	releases chan []releaseItem
	flushes  chan chan struct{} // unbuffered: a request sent is a request taken
	stopping chan struct{}      // closed by stop: failing flushes give up
	quit     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	quitOnce sync.Once
}

func newSettler(store outbox.Store, owner string, logger watermill.LoggerAdapter, released func(...string)) *settler {
	st := &settler{
		store:    store,
		owner:    owner,
		logger:   logger,
		released: released,
		updates:  make(chan outbox.StatusUpdate, maxSettleBatch),
		linger:   settleLinger,
		cut:      make(chan struct{}, 1),
		releases: make(chan []releaseItem, 64),
		flushes:  make(chan chan struct{}),
		stopping: make(chan struct{}),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go st.run()
	return st
}

// update queues an outcome; it blocks while the queue is full, which slows
// the workers down to what the database records. After close it drops the
// outcome: the lease expires and the event is delivered again.
func (st *settler) update(u outbox.StatusUpdate) {
	select {
	case st.updates <- u:
		if len(st.updates) >= maxSettleBatch/2 {
			signal(st.cut)
		}
	case <-st.done:
	}
}

// release queues claims to hand back; after close, the leases expire
// instead.
func (st *settler) release(items []releaseItem) {
	select {
	case st.releases <- items:
	case <-st.done:
	}
}

// flush returns once every outcome and release queued before the call is
// recorded (or given up on, once Close began). A subscription calls it before
// closing its channel: a Watermill router's Close returns when the
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
	batch := make([]outbox.StatusUpdate, 0, maxSettleBatch)
	for {
		select {
		case u := <-st.updates:
			st.flushUpdates(st.gather(append(batch[:0], u)))
		case items := <-st.releases:
			st.flushReleases(items)
		case flushed := <-st.flushes:
			st.drain()
			close(flushed)
			select { // a signal no linger took: the queue is empty now
			case <-st.cut:
			default:
			}
		case <-st.quit:
			st.drain()
			return
		}
	}
}

// gather adds to batch the outcomes that arrive within the linger, up to
// maxSettleBatch. It sleeps through the linger rather than wake for each
// outcome, unless the queue fills up, a flush is requested or the settler
// closes. Releases are written meanwhile: a writer whose committed events
// found the hot path full waits for room in the release queue, and other
// relays wait for the release to claim them.
func (st *settler) gather(batch []outbox.StatusUpdate) []outbox.StatusUpdate {
	linger := time.NewTimer(st.linger)
	defer linger.Stop()
	for {
		select {
		case items := <-st.releases:
			st.flushReleases(items)
			continue
		case <-linger.C:
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

// drain records everything queued, in batches like run does.
func (st *settler) drain() {
	var batch []outbox.StatusUpdate
	for {
		select {
		case u := <-st.updates:
			if batch = append(batch, u); len(batch) == maxSettleBatch {
				st.flushUpdates(batch)
				batch = batch[:0]
			}
		case items := <-st.releases:
			st.flushReleases(items)
		default:
			if len(batch) > 0 {
				st.flushUpdates(batch)
			}
			return
		}
	}
}

func (st *settler) flushUpdates(batch []outbox.StatusUpdate) {
	st.retry("record outcomes", func(ctx context.Context) error {
		_, err := st.store.UpdateStatus(ctx, batch...)
		return err
	})
}

func (st *settler) flushReleases(items []releaseItem) {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.id
	}
	ok := st.retry("release claims", func(ctx context.Context) error {
		_, err := st.store.Release(ctx, st.owner, ids)
		return err
	})
	if !ok {
		return
	}
	woken := map[string]bool{}
	for _, it := range items {
		if !woken[it.topic] {
			woken[it.topic] = true
			st.released(it.topic)
		}
	}
}

// retry runs op until it succeeds or, once the settler is stopping,
// settleGiveUp has passed; it reports whether op succeeded.
func (st *settler) retry(what string, op func(ctx context.Context) error) bool {
	var deadline time.Time
	pause := settleRetry
	for {
		ctx, cancel := context.WithTimeout(context.Background(), settleGiveUp)
		err := op(ctx)
		cancel()
		if err == nil {
			return true
		}
		if deadline.IsZero() && st.isStopping() {
			deadline = time.Now().Add(settleGiveUp)
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			st.logger.Error("outbox: giving up; the claims will expire and the events be delivered again", err,
				watermill.LogFields{"operation": what})
			return false
		}
		st.logger.Error("outbox: retrying", err, watermill.LogFields{"operation": what, "pause": pause})
		time.Sleep(pause)
		pause = min(2*pause, settleRetryMax)
	}
}

func (st *settler) isStopping() bool {
	select {
	case <-st.stopping:
		return true
	default:
		return false
	}
}

// stop tells the settler that its subscriber is closing: it still records
// what comes, but a statement that keeps failing is given up after
// settleGiveUp, so that the subscriptions' final flushes, and Close with
// them, end while the database is down.
func (st *settler) stop() { st.stopOnce.Do(func() { close(st.stopping) }) }

// close records everything queued and stops.
func (st *settler) close() error {
	st.stop()
	st.quitOnce.Do(func() { close(st.quit) })
	<-st.done
	return nil
}
