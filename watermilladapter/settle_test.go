package watermilladapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/logtest"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// newTestSettler returns a settler on driver, on a test clock, with no
// logger nor metrics.
func newTestSettler(driver outboxdriver.Executor) (*settler, *clocktest.Clock) {
	clock := clocktest.New(testStart)
	return newSettler(driver, clock, "relay", slog.New(slog.DiscardHandler), nopMetrics{}, func(...string) {}), clock
}

// stoppingSettler returns a settler on driver, on a test clock, that is
// stopping: Close began.
func stoppingSettler(driver outboxdriver.Executor) (*settler, *clocktest.Clock) {
	st, clock := newTestSettler(driver)
	st.stop()
	return st, clock
}

// flushing flushes st in a goroutine of its own and returns a channel
// closed when the flush returns.
func flushing(st *settler) <-chan struct{} {
	flushed := make(chan struct{})
	go func() {
		st.flush()
		close(flushed)
	}()
	return flushed
}

// Outcomes that trickle in, as a steady stream of hot-path deliveries
// produces them, must share statements: a database that answers instantly
// would otherwise get one statement, one transaction, per outcome.
func TestSettlerRecordsOutcomesArrivingWithinTheLingerInOneStatement(t *testing.T) {
	t.Parallel()
	driver := &instantDriver{}
	st, clock := newTestSettler(driver)
	const outcomes, every = 20, 5 * time.Millisecond // over two lingers
	for i := range outcomes {
		st.update(outcome{update: done(eventID(i))})
		clock.Advance(every)
	}
	require.NoError(t, st.close())
	statements, total := driver.recorded()
	require.Equal(t, outcomes, total, "batches %v", driver.batches)
	// A batch takes what arrives within the linger from its first
	// outcome: one statement per linger the arrivals span, and one for the
	// window a late arrival opens. Without the linger, every outcome would
	// be a statement of its own.
	require.LessOrEqual(t, statements, int(outcomes*every/settleLinger)+1, "batches %v", driver.batches)
}

// A subscription's close flushes the settler: the flush records what is
// queued at once instead of waiting for the rest of the linger, and
// leaves the batches after it to linger as before.
func TestSettlerFlushCutsTheLingerShort(t *testing.T) {
	t.Parallel()
	driver := &instantDriver{}
	st, clock := newTestSettler(driver)
	t.Cleanup(func() { _ = st.close() })
	st.flush() // nothing queued: its signal must not cut the next linger short
	waitFor(t, "the flush's signal taken back", func() bool { return len(st.cut) == 0 })

	st.update(outcome{update: done("event-1")})
	waitForTimer(t, clock, settleLinger) // the settler lingers, and the clock stands still
	statements, _ := driver.recorded()
	require.Zero(t, statements, "recorded during the linger")
	select {
	case <-flushing(st):
	case <-time.After(waitLimit):
		t.Fatal("the flush waited for the linger to end")
	}
	statements, outcomes := driver.recorded()
	require.Equal(t, 1, statements)
	require.Equal(t, 1, outcomes)
}

// bottleneckDriver is a database that is the bottleneck: each outcome
// statement ends once the workers have filled the settler's queue again,
// until open is set.
type bottleneckDriver struct {
	instantDriver
	full func() bool
	open atomic.Bool
}

func (d *bottleneckDriver) MarkDone(ctx context.Context, p outboxdriver.MarkDoneParams) (int64, error) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !d.open.Load() && !d.full() {
		<-tick.C
	}
	return d.instantDriver.MarkDone(ctx, p)
}

// A subscription that ends flushes the settler before it closes its
// channel, while the other subscriptions' workers may keep the queue full:
// the flush waits for what was queued before it, not for the queue to be
// empty, which it then never is.
func TestSettlerFlushReturnsWhileOtherWorkersKeepTheQueueFull(t *testing.T) {
	t.Parallel()
	driver := &bottleneckDriver{}
	st, _ := newTestSettler(driver)
	driver.full = func() bool { return len(st.updates) == cap(st.updates) }
	stop := make(chan struct{})
	var workers sync.WaitGroup
	for w := range 8 {
		workers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
					st.update(outcome{update: done(fmt.Sprintf("w%d-%d", w, i))})
				}
			}
		})
	}
	t.Cleanup(func() {
		driver.open.Store(true)
		close(stop)
		workers.Wait()
		_ = st.close()
	})
	waitFor(t, "the workers to fill the queue", driver.full)

	select {
	case <-flushing(st):
	case <-time.After(waitLimit):
		_, outcomes := driver.recorded()
		t.Fatalf("flush still waiting, %d outcomes recorded meanwhile: it waits for outcomes queued after it", outcomes)
	}
}

// The DONE of an ordered event is recorded without the linger, and then
// wakes its subscription: the next event of the aggregate waits for both.
func TestSettlerRecordsAnOrderedDoneAtOnceAndWakesItsSubscription(t *testing.T) {
	t.Parallel()
	driver := &instantDriver{}
	st, _ := newTestSettler(driver)
	t.Cleanup(func() { _ = st.close() })
	sub := &subscription{nextCh: make(chan struct{}, 1)}

	order1 := outboxdriver.Aggregate{Topic: "t", Type: "Order", ID: "1"}
	st.update(outcome{update: done("event-1"), wake: sub, aggregate: order1})
	select {
	case <-sub.nextCh: // the clock stands still: the linger did not end
	case <-time.After(waitLimit):
		t.Fatal("the ordered DONE waited for the linger")
	}
	statements, outcomes := driver.recorded()
	require.Equal(t, 1, statements, "statements when the subscription was woken")
	require.Equal(t, 1, outcomes)
	require.Equal(t, []outboxdriver.Aggregate{order1}, sub.takeNext(10), "the aggregates whose next events to claim")
}

// Releases do not wait for the outcomes' linger: a writer whose committed
// events found the hot path full hands them back after its commit, and
// must not wait out the linger for room in the release queue.
func TestSettlerWritesReleasesDuringTheLinger(t *testing.T) {
	t.Parallel()
	driver := &instantDriver{}
	st, clock := newTestSettler(driver)
	t.Cleanup(func() { _ = st.close() })
	st.update(outcome{update: done("event-1")})
	waitForTimer(t, clock, settleLinger) // the settler took the outcome and lingers

	st.release([]releaseItem{{id: "event-2", topic: "orders"}})
	waitFor(t, "the release", func() bool { return driver.releasedCount() == 1 })
	statements, _ := driver.recorded()
	require.Zero(t, statements, "outcome statements during the linger")
}

// downDriver fails every statement, as a database that went away, and
// keeps the ids of each.
type downDriver struct {
	instantDriver
	calls [][]string // under instantDriver.mu
}

func (d *downDriver) fail(ids []string) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, slices.Clone(ids))
	return 0, errors.New("database unreachable")
}

func (d *downDriver) MarkDone(_ context.Context, p outboxdriver.MarkDoneParams) (int64, error) {
	return d.fail(p.IDs)
}

func (d *downDriver) RecordOutcomes(_ context.Context, p outboxdriver.RecordOutcomesParams) (int64, error) {
	ids := make([]string, len(p.Outcomes))
	for i, o := range p.Outcomes {
		ids[i] = o.ID
	}
	return d.fail(ids)
}

func (d *downDriver) Release(_ context.Context, p outboxdriver.ReleaseParams) (int64, error) {
	return d.fail(p.IDs)
}

// attempts returns the statements tried, each named by its ids, in the
// order first tried, and how often each was tried.
func (d *downDriver) attempts() (statements []string, tries map[string]int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	tries = map[string]int{}
	for _, ids := range d.calls {
		key := strings.Join(ids, ",")
		if tries[key]++; tries[key] == 1 {
			statements = append(statements, key)
		}
	}
	return statements, tries
}

// Once Close began, the settler gives up on everything queued by one
// deadline, not one per statement: each statement after it gets a single
// attempt, so Close takes about settleGiveUp however much is queued, and
// reports what it gave up on.
func TestSettlerGivesUpOnEverythingByOneDeadline(t *testing.T) {
	t.Parallel()
	driver := &downDriver{}
	st, clock := stoppingSettler(driver)
	const n = 10
	for i := range n {
		st.release([]releaseItem{{id: fmt.Sprint("released-", i), topic: "orders"}})
	}
	st.update(outcome{update: done("done")})
	advanceUntil(t, clock, settleRetry, "the first statement tried again", func() bool {
		_, tries := driver.attempts()
		return len(tries) == 1 && slices.Max(slices.Collect(maps.Values(tries))) > 1
	})
	clock.Set(testStart.Add(settleGiveUp)) // the deadline
	err := onClock(t, clock, st.close)
	require.ErrorIs(t, err, ErrNotRecorded)
	require.ErrorContains(t, err, fmt.Sprintf(": %d outcomes and releases", n+1))
	statements, tries := driver.attempts()
	for _, s := range statements[1:] {
		require.Equal(t, 1, tries[s], "statement %s, after the deadline", s)
	}

	st.release([]releaseItem{{id: "committed-after-close", topic: "orders"}})
	_, tries = driver.attempts()
	require.Equal(t, 1, tries["committed-after-close"], "a release after close is tried at once, once")
}

// flakyDriver fails its first failures statements, then records them.
type flakyDriver struct {
	instantDriver
	failures int
}

func (d *flakyDriver) MarkDone(ctx context.Context, p outboxdriver.MarkDoneParams) (int64, error) {
	d.mu.Lock()
	failing := d.failures > 0
	d.failures--
	d.mu.Unlock()
	if failing {
		return 0, errors.New("Error 1213 (40001): Deadlock found when trying to get lock")
	}
	return d.instantDriver.MarkDone(ctx, p)
}

// A statement that fails once (a deadlock victim, a connection lost) and
// then succeeds is a warning, one line per failed attempt, with one error
// attribute: a retry is not an error until the settler gives up.
func TestSettlerWarnsOfEachFailedAttempt(t *testing.T) {
	t.Parallel()
	for _, failures := range []int{1, 2} {
		driver := &flakyDriver{failures: failures}
		logger, capture := logtest.New()
		metrics := &backlogAges{}
		clock := clocktest.New(testStart)
		st := newSettler(driver, clock, "me", logger, metrics, func(...string) {})
		st.update(outcome{update: done("done")})
		runClockUntil(t, clock, flushing(st)) // through the retries' pauses
		require.NoError(t, st.close())
		records := capture.Records()
		require.Len(t, records, failures, "one line per failed attempt")
		for _, r := range records {
			require.Equal(t, slog.LevelWarn, r.Level)
			require.Equal(t, "outbox: recording failed; retrying after the pause", r.Msg)
			require.Equal(t, []string{"error", "events", "operation", "pause"}, slices.Sorted(maps.Keys(r.Attrs)))
		}
		require.Equal(t, failures, metrics.storeErrorsOf(" record"), "every failed statement is counted")
	}
}

// WaitIdle hurries the settler: a statement that failed is tried again
// at once, not at the end of its pause on a clock that may never move
// (a test's jump of the clock cuts off a statement in flight).
func TestSettlerHurriedRetriesAtOnce(t *testing.T) {
	t.Parallel()
	driver := &flakyDriver{failures: 1}
	st, clock := newTestSettler(driver)
	st.update(outcome{update: done("done")})
	flushed := flushing(st)
	statements := func() (failed bool, recorded int) {
		driver.mu.Lock()
		defer driver.mu.Unlock()
		return driver.failures < 1, len(driver.batches)
	}
	deadline := time.Now().Add(10 * time.Second)
	for failed, _ := statements(); !failed; failed, _ = statements() {
		require.True(t, time.Now().Before(deadline), "no statement tried")
		time.Sleep(time.Millisecond)
	}
	require.True(t, clock.WaitForTimer(settleRetry, 10*time.Second), "the settler pauses before it tries again")
	select {
	case <-flushed:
		t.Fatal("flushed before the failed statement was tried again")
	default:
	}
	for done := false; !done; {
		require.True(t, time.Now().Before(deadline), "the hurried retry did not come")
		st.hurry()
		select {
		case <-flushed:
			done = true
		case <-time.After(time.Millisecond):
		}
	}
	_, recorded := statements()
	require.Equal(t, 1, recorded, "recorded by the second attempt")
	require.NoError(t, st.close())
}

// hangingDriver is a database that stopped answering: every statement
// hangs until its context ends. It counts the statements. With a gate,
// each statement also waits for the gate to close, however long the
// settler gives it: the first one holds the settler, and the queue behind
// it, until the test lets it go.
type hangingDriver struct {
	instantDriver
	statements atomic.Int64
	gate       chan struct{}
}

func (d *hangingDriver) hang(ctx context.Context) (int64, error) {
	d.statements.Add(1)
	if d.gate != nil {
		<-d.gate
	}
	<-ctx.Done()
	return 0, ctx.Err()
}

func (d *hangingDriver) MarkDone(ctx context.Context, _ outboxdriver.MarkDoneParams) (int64, error) {
	return d.hang(ctx)
}

func (d *hangingDriver) RecordOutcomes(ctx context.Context, _ outboxdriver.RecordOutcomesParams) (int64, error) {
	return d.hang(ctx)
}

func (d *hangingDriver) Release(ctx context.Context, _ outboxdriver.ReleaseParams) (int64, error) {
	return d.hang(ctx)
}

// Releases queued while a statement hangs go out together in the next
// one, not one statement each: at Close, every handler given up on after
// DrainTimeout and every subscription releases its claims, and with the
// database not answering, each statement past the deadline waits up to
// settleLastChance, so Close would take a second per release instead of
// about settleGiveUp.
func TestSettlerReleasesQueuedBehindAHangingStatementTogether(t *testing.T) {
	t.Parallel()
	driver := &hangingDriver{gate: make(chan struct{})}
	st, clock := stoppingSettler(driver)
	st.release([]releaseItem{{id: "first", topic: "orders"}})
	waitFor(t, "the first release to hang", func() bool { return driver.statements.Load() == 1 })
	const n = 10
	for i := range n {
		st.release([]releaseItem{{id: fmt.Sprint("released-", i), topic: "orders"}})
	}
	close(driver.gate)
	err := onClock(t, clock, st.close)
	require.ErrorIs(t, err, ErrNotRecorded)
	require.ErrorContains(t, err, fmt.Sprintf(": %d outcomes and releases", n+1))
	require.Equal(t, int64(2), driver.statements.Load(), "statements: the first release, then the rest together")
}

// A statement sent before Close began is given up by the deadline of the
// statements sent after: settleGiveUp after Close began. With a timeout of
// its own, it would hang that long from when it was sent, and a statement
// after it would then get another settleGiveUp: Close took about twice
// settleGiveUp with the database not answering.
func TestSettlerCutsOffAStatementSentBeforeClose(t *testing.T) {
	t.Parallel()
	driver := &hangingDriver{}
	st, clock := newTestSettler(driver)
	const giveUp = 5 * time.Second // no other wait is as long
	st.giveUp = giveUp             // set before the first statement is sent, which reads it
	st.update(outcome{update: done("done")})
	waitForTimer(t, clock, settleLinger)
	clock.Advance(settleLinger)
	waitFor(t, "the statement to hang", func() bool { return driver.statements.Load() == 1 })

	closed := make(chan error, 1)
	go func() { closed <- st.close() }()
	waitForTimer(t, clock, giveUp)
	clock.Advance(giveUp)
	select {
	case err := <-closed:
		require.ErrorIs(t, err, ErrNotRecorded)
	case <-time.After(waitLimit):
		t.Fatal("the statement sent before Close was not cut off when Close gave up")
	}
	require.Equal(t, int64(1), driver.statements.Load(), "the statement hanging when Close began is the last one tried")
}

// A writer whose committed events found the hot path full hands them back
// after its commit, in the business caller's goroutine: however long the
// settler's statements take, the hand-back must not wait for them, or a
// lock wait or a slow database would hold up requests that already
// committed.
func TestSettlerReleaseNeverWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	driver := &hangingDriver{}
	st, clock := newTestSettler(driver)
	const writes = 500
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for i := range writes {
			st.release([]releaseItem{{id: fmt.Sprint("overflow-", i), topic: "orders"}})
		}
	}()
	select {
	case <-returned: // the clock stands still: every statement hangs
	case <-time.After(waitLimit):
		t.Fatalf("releases still blocked, with %d statements hanging", driver.statements.Load())
	}
	err := onClock(t, clock, st.close)
	require.ErrorIs(t, err, ErrNotRecorded)
	require.ErrorContains(t, err, fmt.Sprintf(": %d outcomes and releases", writes))
}

// The queue of releases is bounded: past maxQueuedReleases, a release is
// dropped (its lease ends and the cold path delivers the events then)
// rather than growing without limit while the database does not answer,
// and Close counts it as not recorded.
func TestSettlerDropsReleasesBeyondTheQueueBound(t *testing.T) {
	t.Parallel()
	driver := &hangingDriver{gate: make(chan struct{})}
	st, clock := stoppingSettler(driver)
	st.release([]releaseItem{{id: "first", topic: "orders"}})
	waitFor(t, "the first release to hang", func() bool { return driver.statements.Load() == 1 })
	full := make([]releaseItem, maxQueuedReleases)
	for i := range full {
		full[i] = releaseItem{id: fmt.Sprint("queued-", i), topic: "orders"}
	}
	st.release(full)
	st.release([]releaseItem{{id: "beyond", topic: "orders"}})
	require.Equal(t, maxQueuedReleases, st.queuedReleaseCount())
	close(driver.gate)
	err := onClock(t, clock, st.close)
	require.ErrorIs(t, err, ErrNotRecorded)
	require.ErrorContains(t, err, fmt.Sprintf(": %d outcomes and releases", maxQueuedReleases+2))
}

// hangingClaims is a database that stopped answering claims: Claim hangs
// until its context ends. It counts the claims begun.
type hangingClaims struct {
	instantDriver
	claims atomic.Int64
}

func (d *hangingClaims) Claim(ctx context.Context, _ *outboxdriver.ClaimParams) ([]outboxdriver.Row, error) {
	d.claims.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// A claim the database does not answer does not hold Close for the whole
// claimTimeout: once Close begins, the claim gets as long as failing
// statements do (the settler's giveUp) and is then given up, leaving
// whatever the server may still commit to the lease.
func TestCloseGivesUpOnAHangingClaim(t *testing.T) {
	t.Parallel()
	driver := &hangingClaims{}
	clock := clocktest.New(testStart)
	sub, err := NewSubscriber(fakeStore(t, driver, clock), SubscriberConfig{Clock: clock, PollInterval: time.Hour})
	require.NoError(t, err)
	_, err = sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	waitFor(t, "the claim to hang", func() bool { return driver.claims.Load() == 1 })
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	waitForTimer(t, clock, settleGiveUp) // Close began: the claim is cut off then
	clock.Advance(settleGiveUp)
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(waitLimit):
		t.Fatalf("Close still waiting for a hanging claim %s after it began", settleGiveUp)
	}
	require.Less(t, clock.Now().Sub(testStart), claimTimeout)
}

// failingClaims is a database that refuses claims (a revoked permission,
// a statement timeout) until told to accept them; it counts the claims.
type failingClaims struct {
	instantDriver
	claims    atomic.Int64
	accepting atomic.Bool
}

func (d *failingClaims) Claim(context.Context, *outboxdriver.ClaimParams) ([]outboxdriver.Row, error) {
	d.claims.Add(1)
	if d.accepting.Load() {
		return nil, nil
	}
	return nil, errors.New("permission denied for table outbox_event")
}

// Claims that fail are not sent again at the rate of the wake-ups, which
// come with every commit announced, but after a pause that grows with
// each failure; once a claim succeeds, wake-ups bring claims at once again.
func TestFailingClaimsBackOffWhateverWakesThem(t *testing.T) {
	t.Parallel()
	driver := &failingClaims{}
	clock := clocktest.New(testStart)
	sub, _ := subscribeOrders(t, driver, SubscriberConfig{Clock: clock, PollInterval: time.Hour})
	waitFor(t, "the first claim", func() bool { return driver.claims.Load() == 1 })
	for range 1000 { // a second of wake-ups, one a millisecond
		sub.Wake("orders")
		clock.Advance(time.Millisecond)
	}
	// Pauses of 50 ms doubling: 5 claims in the first second, if the
	// claimer keeps up with the clock; at the wake-ups' rate (one per
	// WakeCooldown) there would be 200.
	require.LessOrEqual(t, driver.claims.Load(), int64(5), "failing claims sent in a second of wake-ups")

	driver.accepting.Store(true)
	accepted := driver.claims.Load() + 1
	waitFor(t, "claims to resume once the database accepts them", func() bool {
		sub.Wake("orders")
		clock.Advance(10 * time.Millisecond)
		return driver.claims.Load() >= accepted
	})
	waitForTimer(t, clock, time.Hour) // the claimer waits for a poll or a wake-up
	for i := range 10 {
		before := driver.claims.Load()
		sub.Wake("orders")
		clock.Advance(DefaultWakeCooldown)
		waitFor(t, fmt.Sprintf("wake-up %d to bring a claim within the cooldown", i), func() bool {
			return driver.claims.Load() > before
		})
	}
}

// queuedReleaseCount returns how many claims wait to be released.
func (st *settler) queuedReleaseCount() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.releases)
}

// invisibleDriver is a database to which a streamed event's row is not
// visible yet the first time its DONE is recorded: a feed hands a
// transaction over as soon as its commit is in the log, a moment before
// other sessions see it.
type invisibleDriver struct {
	instantDriver
	row      outboxdriver.Row
	markings int
	done     bool
}

func (d *invisibleDriver) MarkDone(_ context.Context, p outboxdriver.MarkDoneParams) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.markings++
	if d.markings == 1 {
		return 0, nil
	}
	d.done = true
	return int64(len(p.IDs)), nil
}

func (d *invisibleDriver) Get(context.Context, string) (outboxdriver.Row, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	row := d.row
	if d.done {
		row.Status = int16(outbox.StatusDone)
	}
	return row, true, nil
}

// A streamed event's DONE that found its row not yet visible is recorded
// again, and its transaction settled only then.
func TestSettlerRecordsAStreamedOutcomeAgainUntilItsRowChanged(t *testing.T) {
	t.Parallel()
	st, clock := newTestSettler(nil)
	driver := &invisibleDriver{row: outboxdriver.Row{ID: "event-1", Status: int16(outbox.StatusNew), UpdatedAt: clock.Now()}}
	st.driver = driver
	t.Cleanup(func() { require.NoError(t, st.close()) })
	settled := make(chan struct{})
	tx := &feedTx{settled: func() { close(settled) }}
	tx.left.Store(1)
	st.update(outcome{update: done("event-1"), feed: tx, unleased: true, streamed: driver.row.UpdatedAt})
	advanceUntil(t, clock, settleLinger, "the transaction settled", func() bool { return isDone(settled) })
	driver.mu.Lock()
	defer driver.mu.Unlock()
	require.Equal(t, 2, driver.markings, "the DONE recorded again")
	require.True(t, driver.done)
}
