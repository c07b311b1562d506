package watermilladapter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// instantStore is an outbox.Store with no events to claim that records
// outcomes at once, keeping the size of each UpdateStatus batch: the
// relay's own cost and batching, without a database.
type instantStore struct {
	outbox.Store
	mu       sync.Mutex
	batches  []int
	released int
}

func (s *instantStore) UpdateStatus(_ context.Context, _ string, updates ...outbox.StatusUpdate) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, len(updates))
	return int64(len(updates)), nil
}

func (*instantStore) Claim(context.Context, outbox.ClaimRequest) ([]outbox.Event, error) {
	return nil, nil
}

func (*instantStore) Backlog(context.Context, string) (int64, time.Time, error) {
	return 0, time.Time{}, nil
}

func (s *instantStore) Release(_ context.Context, _ string, ids []string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released += len(ids)
	return int64(len(ids)), nil
}

func (s *instantStore) releasedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.released
}

// recorded returns the statements issued and the outcomes they recorded.
func (s *instantStore) recorded() (statements, outcomes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.batches {
		outcomes += n
	}
	return len(s.batches), outcomes
}

// Outcomes that trickle in, as a steady stream of hot-path deliveries
// produces them, must share statements: a database that answers instantly
// would otherwise get one statement, one transaction, per outcome.
func TestSettlerRecordsOutcomesArrivingWithinTheLingerInOneStatement(t *testing.T) {
	store := &instantStore{}
	st := newSettler(store, "relay", watermill.NopLogger{}, outbox.NopMetrics{}, func(...string) {})
	const outcomes = 20
	start := time.Now()
	for i := range outcomes {
		st.update(outcome{update: outbox.Done(fmt.Sprint("event-", i))})
		time.Sleep(100 * time.Microsecond)
	}
	spread := time.Since(start)
	if err := st.close(); err != nil {
		t.Fatal(err)
	}
	statements, total := store.recorded()
	if total != outcomes {
		t.Fatalf("recorded %d outcomes, want %d (batches %v)", total, outcomes, store.batches)
	}
	// One statement per linger the arrivals spanned, and one more for the
	// window a late arrival opens; without the linger, every outcome would
	// be a statement of its own.
	most := int(spread/settleLinger) + 2
	if statements > most {
		t.Fatalf("%d outcomes arriving over %s took %d statements %v, want at most %d",
			outcomes, spread, statements, store.batches, most)
	}
}

// A subscription's close flushes the settler: the flush records what is
// queued at once instead of sleeping through the rest of the linger, and
// leaves the batches after it to linger as before.
func TestSettlerFlushCutsTheLingerShort(t *testing.T) {
	store := &instantStore{}
	st := newSettler(store, "relay", watermill.NopLogger{}, outbox.NopMetrics{}, func(...string) {})
	defer st.close()
	st.linger = time.Hour // set before the first outcome is sent, which the settler reads it after
	st.flush()            // nothing queued: its signal must not cut the next linger short

	st.update(outcome{update: outbox.Done("event-1")})
	time.Sleep(50 * time.Millisecond)
	if statements, _ := store.recorded(); statements != 0 {
		t.Fatalf("%d statements 50 ms into an hour's linger, want 0", statements)
	}
	flushed := flushing(st)
	select {
	case <-flushed:
	case <-time.After(10 * time.Second):
		t.Fatal("flush waited for the linger to end")
	}
	if statements, outcomes := store.recorded(); statements != 1 || outcomes != 1 {
		t.Fatalf("after the flush: %d statements recording %d outcomes, want 1 and 1", statements, outcomes)
	}
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

// slowStore takes a while over each outcome statement: a database that is
// the bottleneck, which keeps the workers waiting for room in the queue.
type slowStore struct {
	instantStore
	delay time.Duration
}

func (s *slowStore) UpdateStatus(ctx context.Context, owner string, updates ...outbox.StatusUpdate) (int64, error) {
	time.Sleep(s.delay)
	return s.instantStore.UpdateStatus(ctx, owner, updates...)
}

// A subscription that ends flushes the settler before it closes its
// channel, while the other subscriptions' workers may keep the queue full:
// the flush waits for what was queued before it, not for the queue to be
// empty, which it then never is.
func TestSettlerFlushReturnsWhileOtherWorkersKeepTheQueueFull(t *testing.T) {
	store := &slowStore{delay: 2 * time.Millisecond}
	st := newSettler(store, "relay", watermill.NopLogger{}, outbox.NopMetrics{}, func(...string) {})
	stop := make(chan struct{})
	var workers sync.WaitGroup
	for w := range 8 {
		workers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
					st.update(outcome{update: outbox.Done(fmt.Sprintf("w%d-%d", w, i))})
				}
			}
		})
	}
	defer func() {
		close(stop)
		workers.Wait()
		_ = st.close()
	}()
	for deadline := time.Now().Add(5 * time.Second); len(st.updates) < cap(st.updates); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the workers never filled the queue")
		}
	}

	flushed := flushing(st)
	// What was queued takes two statements of 2 ms, and the batch in hand one.
	select {
	case <-flushed:
	case <-time.After(3 * time.Second):
		_, outcomes := store.recorded()
		t.Fatalf("flush still waiting after 3 s, %d outcomes recorded meanwhile: it waits for outcomes queued after it", outcomes)
	}
}

// The DONE of an ordered event is recorded without the linger, and then
// wakes its subscription: the next event of the aggregate waits for both.
func TestSettlerRecordsAnOrderedDoneAtOnceAndWakesItsSubscription(t *testing.T) {
	store := &instantStore{}
	st := newSettler(store, "relay", watermill.NopLogger{}, outbox.NopMetrics{}, func(...string) {})
	defer st.close()
	st.linger = time.Hour // set before the first outcome is sent, which the settler reads it after
	sub := &subscription{nextCh: make(chan struct{}, 1)}

	order1 := outbox.Aggregate{Topic: "t", Type: "Order", ID: "1"}
	st.update(outcome{update: outbox.Done("event-1"), wake: sub, aggregate: order1})
	select {
	case <-sub.nextCh:
	case <-time.After(10 * time.Second):
		t.Fatal("the ordered DONE waited for the linger")
	}
	if statements, outcomes := store.recorded(); statements != 1 || outcomes != 1 {
		t.Fatalf("when the subscription was woken: %d statements recording %d outcomes, want 1 and 1", statements, outcomes)
	}
	if next := sub.takeNext(10); !slices.Equal(next, []outbox.Aggregate{order1}) {
		t.Fatalf("the subscription was told to claim the next events of %v, want %v", next, order1)
	}
}

// Releases do not wait for the outcomes' linger: a writer whose committed
// events found the hot path full hands them back after its commit, and
// must not wait out the linger for room in the release queue.
func TestSettlerWritesReleasesDuringTheLinger(t *testing.T) {
	store := &instantStore{}
	st := newSettler(store, "relay", watermill.NopLogger{}, outbox.NopMetrics{}, func(...string) {})
	defer st.close()
	st.linger = time.Hour // set before the first outcome is sent, which the settler reads it after
	st.update(outcome{update: outbox.Done("event-1")})
	// Let the settler take the outcome and begin its linger: queued
	// together, the release could be taken first.
	time.Sleep(20 * time.Millisecond)

	st.release([]releaseItem{{id: "event-2", topic: "orders"}})
	deadline := time.Now().Add(10 * time.Second)
	for store.releasedCount() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the release waited for the outcomes' linger")
		}
		time.Sleep(time.Millisecond)
	}
	if statements, _ := store.recorded(); statements != 0 {
		t.Fatalf("%d outcome statements during an hour's linger, want 0", statements)
	}
}

// downStore fails every statement, with err or as a database that went
// away, and counts them.
type downStore struct {
	outbox.Store
	err        error
	mu         sync.Mutex
	statements int
}

func (s *downStore) fail() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statements++
	if s.err != nil {
		return s.err
	}
	return errors.New("database unreachable")
}

func (s *downStore) UpdateStatus(context.Context, string, ...outbox.StatusUpdate) (int64, error) {
	return 0, s.fail()
}

func (s *downStore) Release(context.Context, string, []string) (int64, error) { return 0, s.fail() }

func (s *downStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statements
}

// Once Close began, the settler gives up on everything queued by one
// deadline, not one per statement: each statement after it gets a single
// attempt, so Close takes about settleGiveUp however much is queued, and
// reports what it gave up on. (With a deadline per statement, each of the
// releases below would be tried 3 times.)
func TestSettlerGivesUpOnEverythingByOneDeadline(t *testing.T) {
	t.Parallel()
	store := &downStore{}
	st := stoppingSettler(store)
	const n = 10
	for i := range n {
		st.release([]releaseItem{{id: fmt.Sprint("released-", i), topic: "orders"}})
	}
	st.update(outcome{update: outbox.Done("done")})
	for st.queuedReleaseCount() > 0 || len(st.updates) > 0 { // everything taken and tried
		time.Sleep(10 * time.Millisecond)
	}
	err := st.close()
	require.ErrorIs(t, err, ErrNotRecorded)
	require.ErrorContains(t, err, fmt.Sprintf(": %d outcomes and releases", n+1))
	tried := store.count()
	require.LessOrEqual(t, tried, 3+n, "statements tried: 3 for the first, 1 for each after it")

	st.release([]releaseItem{{id: "committed-after-close", topic: "orders"}})
	require.Equal(t, tried+1, store.count(), "a release after close is tried at once, once")
}

// A statement that fails once (a deadlock victim, a connection lost) and
// then succeeds is routine: noted, not logged as an error. A second failure
// in a row is an error.
func TestSettlerLogsAnErrorOnlyWhenTheRetryFailsToo(t *testing.T) {
	t.Parallel()
	for _, failures := range []int{1, 2} {
		store := &flakyStore{failures: failures}
		logger := watermill.NewCaptureLogger()
		metrics := &backlogAges{}
		st := newSettler(store, "me", logger, metrics, func(...string) {})
		st.update(outcome{update: outbox.Done("done")})
		st.flush()
		require.NoError(t, st.close())
		captured := logger.Captured()
		require.Len(t, captured[watermill.InfoLogLevel], 1, "%d failures: the first is noted", failures)
		require.Len(t, captured[watermill.ErrorLogLevel], failures-1, "%d failures: the second is an error", failures)
		require.Equal(t, failures, metrics.storeErrorsOf(" record"), "every failed statement is counted")
	}
}

// flakyStore fails its first failures statements, then records them.
type flakyStore struct {
	instantStore
	failures int
}

func (s *flakyStore) UpdateStatus(ctx context.Context, owner string, updates ...outbox.StatusUpdate) (int64, error) {
	s.mu.Lock()
	failing := s.failures > 0
	s.failures--
	s.mu.Unlock()
	if failing {
		return 0, errors.New("Error 1213 (40001): Deadlock found when trying to get lock")
	}
	return s.instantStore.UpdateStatus(ctx, owner, updates...)
}

// A statement the store refuses as invalid fails the same way however
// often it is sent: the settler gives it up at once instead of retrying it
// until Close.
func TestSettlerGivesUpOnInvalidRequests(t *testing.T) {
	t.Parallel()
	store := &downStore{err: fmt.Errorf("postgres: %w", outbox.ErrInvalidRequest)}
	st := newSettler(store, "me", watermill.NopLogger{}, outbox.NopMetrics{}, func(...string) {})
	st.update(outcome{update: outbox.Done("done")})
	for store.count() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(4 * settleRetry) // time enough for two more attempts
	require.ErrorIs(t, st.close(), ErrNotRecorded)
	require.Equal(t, 1, store.count())
}

// hangingStore is a database that stopped answering: every statement
// hangs until its context ends. It counts the statements. With a gate,
// each statement also waits for the gate to close, however long the
// settler gives it: the first one holds the settler, and the queue behind
// it, until the test lets it go.
type hangingStore struct {
	outbox.Store
	statements atomic.Int64
	gate       chan struct{}
}

func (s *hangingStore) hang(ctx context.Context) error {
	s.statements.Add(1)
	if s.gate != nil {
		<-s.gate
	}
	<-ctx.Done()
	return ctx.Err()
}

func (s *hangingStore) UpdateStatus(ctx context.Context, _ string, _ ...outbox.StatusUpdate) (int64, error) {
	return 0, s.hang(ctx)
}

func (s *hangingStore) Release(ctx context.Context, _ string, _ []string) (int64, error) {
	return 0, s.hang(ctx)
}

// Releases queued while a statement hangs go out together in the next
// one, not one statement each: at Close, every handler given up on after
// DrainTimeout and every subscription releases its claims, and with the
// database not answering, each statement past the deadline waits up to
// settleLastChance, so Close would take a second per release instead of
// about settleGiveUp.
func TestSettlerReleasesQueuedBehindAHangingStatementTogether(t *testing.T) {
	t.Parallel()
	store := &hangingStore{gate: make(chan struct{})}
	st := stoppingSettler(store)
	st.release([]releaseItem{{id: "first", topic: "orders"}})
	for store.statements.Load() == 0 { // the first release hangs
		time.Sleep(time.Millisecond)
	}
	const n = 10
	for i := range n {
		st.release([]releaseItem{{id: fmt.Sprint("released-", i), topic: "orders"}})
	}
	close(store.gate)
	for st.queuedReleaseCount() > 0 { // as between DrainTimeout and a subscription's flush
		time.Sleep(10 * time.Millisecond)
	}
	err := st.close()
	require.ErrorIs(t, err, ErrNotRecorded)
	require.ErrorContains(t, err, fmt.Sprintf(": %d outcomes and releases", n+1))
	require.LessOrEqual(t, store.statements.Load(), int64(3), "statements: 2 for the first release, 1 for the rest")
}

// A statement sent before Close began is given up by the deadline of the
// statements sent after: settleGiveUp after Close began. With a timeout of
// its own, it would hang that long from when it was sent, and a statement
// after it would then get another settleGiveUp: Close took about twice
// settleGiveUp with the database not answering.
func TestSettlerCutsOffAStatementSentBeforeClose(t *testing.T) {
	t.Parallel()
	store := &hangingStore{}
	st := newSettler(store, "me", watermill.NopLogger{}, outbox.NopMetrics{}, func(...string) {})
	st.giveUp = 200 * time.Millisecond // set before the first statement is sent
	st.update(outcome{update: outbox.Done("done")})
	for store.statements.Load() == 0 { // sent, and hanging
		time.Sleep(time.Millisecond)
	}
	require.ErrorIs(t, st.close(), ErrNotRecorded)
	require.Equal(t, int64(1), store.statements.Load(), "the statement hanging when Close began is the last one tried")
}

// stoppingSettler returns a settler on store that is stopping (Close
// began) and gives up after 100 ms.
func stoppingSettler(store outbox.Store) *settler {
	st := newSettler(store, "me", watermill.NopLogger{}, outbox.NopMetrics{}, func(...string) {})
	st.giveUp = 100 * time.Millisecond // set before the first statement is sent, which the settler reads it after
	st.stop()
	return st
}

// A writer whose committed events found the hot path full hands them back
// after its commit, in the business caller's goroutine: however long the
// settler's statements take, the hand-back must not wait for them, or a
// lock wait or a slow database would hold up requests that already
// committed.
func TestSettlerReleaseNeverWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	store := &hangingStore{}
	st := newSettler(store, "me", watermill.NopLogger{}, outbox.NopMetrics{}, func(...string) {})
	st.giveUp = 100 * time.Millisecond // each statement hangs this long; set before the first is sent
	const writes = 500
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for i := range writes {
			st.release([]releaseItem{{id: fmt.Sprint("overflow-", i), topic: "orders"}})
		}
	}()
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatalf("releases still blocked after 30 s, with %d statements hanging", store.statements.Load())
	}
	err := st.close()
	require.ErrorIs(t, err, ErrNotRecorded)
	require.ErrorContains(t, err, fmt.Sprintf(": %d outcomes and releases", writes))
}

// The queue of releases is bounded: past maxQueuedReleases, a release is
// dropped (its lease ends and the cold path delivers the events then)
// rather than growing without limit while the database does not answer,
// and Close counts it as not recorded.
func TestSettlerDropsReleasesBeyondTheQueueBound(t *testing.T) {
	t.Parallel()
	store := &hangingStore{gate: make(chan struct{})}
	st := stoppingSettler(store)
	st.release([]releaseItem{{id: "first", topic: "orders"}})
	for store.statements.Load() == 0 { // the first release hangs; the rest queue behind it
		time.Sleep(time.Millisecond)
	}
	full := make([]releaseItem, maxQueuedReleases)
	for i := range full {
		full[i] = releaseItem{id: fmt.Sprint("queued-", i), topic: "orders"}
	}
	st.release(full)
	st.release([]releaseItem{{id: "beyond", topic: "orders"}})
	require.Equal(t, maxQueuedReleases, st.queuedReleaseCount())
	close(store.gate)
	err := st.close()
	require.ErrorIs(t, err, ErrNotRecorded)
	require.ErrorContains(t, err, fmt.Sprintf(": %d outcomes and releases", maxQueuedReleases+2))
}

// hangingClaims is a database that stopped answering claims: Claim hangs
// until its context ends. It counts the claims begun.
type hangingClaims struct {
	instantStore
	claims atomic.Int64
}

func (s *hangingClaims) Claim(ctx context.Context, _ outbox.ClaimRequest) ([]outbox.Event, error) {
	s.claims.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// A claim the database does not answer does not hold Close for the whole
// claimTimeout: once Close begins, the claim gets as long as failing
// statements do (the settler's giveUp) and is then given up, leaving
// whatever the server may still commit to the lease.
func TestCloseGivesUpOnAHangingClaim(t *testing.T) {
	t.Parallel()
	store := &hangingClaims{}
	sub, err := NewSubscriber(store, SubscriberConfig{PollInterval: time.Hour, BacklogInterval: time.Hour})
	require.NoError(t, err)
	sub.settler.giveUp = 100 * time.Millisecond // before anything reads it: the claim below starts after
	_, err = sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	for store.claims.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(claimTimeout / 2):
		t.Fatalf("Close still waiting for a hanging claim after %s", claimTimeout/2)
	}
}

// failingClaims is a database that refuses claims (a revoked permission,
// a statement timeout) until told to accept them; it counts the claims.
type failingClaims struct {
	instantStore
	claims    atomic.Int64
	accepting atomic.Bool
}

func (s *failingClaims) Claim(context.Context, outbox.ClaimRequest) ([]outbox.Event, error) {
	s.claims.Add(1)
	if s.accepting.Load() {
		return nil, nil
	}
	return nil, errors.New("permission denied for table outbox_event")
}

// Claims that fail are not sent again at the rate of the wake-ups, which
// come with every commit announced, but after a pause that grows with
// each failure; once a claim succeeds, wake-ups bring claims at once again.
func TestFailingClaimsBackOffWhateverWakesThem(t *testing.T) {
	t.Parallel()
	store := &failingClaims{}
	sub, err := NewSubscriber(store, SubscriberConfig{PollInterval: time.Hour, BacklogInterval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	_, err = sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	wakeFor := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			sub.Wake("orders")
			time.Sleep(time.Millisecond)
		}
	}
	wakeFor(time.Second)
	// 50 ms doubling: 5 claims in the first second; at the wake-ups' rate
	// (one per WakeCooldown) there would be about 200.
	require.LessOrEqual(t, store.claims.Load(), int64(6), "failing claims sent in a second of wake-ups")

	store.accepting.Store(true)
	require.Eventually(t, func() bool { sub.Wake("orders"); return store.claims.Load() > 6 },
		10*time.Second, 10*time.Millisecond, "claims resume once the database accepts them")
	before := store.claims.Load()
	wakeFor(500 * time.Millisecond)
	require.Greater(t, store.claims.Load()-before, int64(6), "after a claim that succeeds, wake-ups bring claims without a pause")
}

// queuedReleaseCount returns how many claims wait to be released.
func (st *settler) queuedReleaseCount() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.releases)
}
