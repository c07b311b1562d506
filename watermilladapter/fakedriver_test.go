package watermilladapter

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// The tests of this file's package run the relay on fake drivers, without
// a database, and on a clocktest.Clock where time matters: they move the
// clock to the relay's next wait rather than wait for it.

// waitLimit bounds every wait of these tests in real time.
const waitLimit = 10 * time.Second

// testStart is when the tests' clocks start.
var testStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeTx is the transaction of the fake drivers: the relay begins none.
type fakeTx struct{}

// instantDriver is a driver with no events to claim that records
// outcomes and releases at once, keeping the size of each statement: the
// relay's own cost and batching, without a database. The methods it does
// not define panic (its Driver is nil); a test's driver embeds it and
// overrides what it needs.
type instantDriver struct {
	outboxdriver.Driver[fakeTx]

	mu       sync.Mutex
	batches  []int // outcomes recorded by each statement
	released int
}

func (d *instantDriver) record(n int) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.batches = append(d.batches, n)
	return int64(n), nil
}

func (d *instantDriver) MarkDone(_ context.Context, p outboxdriver.MarkDoneParams) (int64, error) {
	return d.record(len(p.IDs))
}

func (d *instantDriver) RecordOutcomes(_ context.Context, p outboxdriver.RecordOutcomesParams) (int64, error) {
	return d.record(len(p.Outcomes))
}

func (*instantDriver) Claim(context.Context, *outboxdriver.ClaimParams) ([]outboxdriver.Row, error) {
	return nil, nil
}

func (*instantDriver) Backlog(context.Context, string) (int64, time.Time, error) {
	return 0, time.Time{}, nil
}

// Stats reads an empty table: the unserved topics' read finds none.
func (*instantDriver) Stats(context.Context, outboxdriver.StatsParams) (outboxdriver.StatsResult, error) {
	return outboxdriver.StatsResult{}, nil
}

func (*instantDriver) CountDead(context.Context, outboxdriver.DeadFilter) (int64, error) {
	return 0, nil
}

func (d *instantDriver) Release(_ context.Context, p outboxdriver.ReleaseParams) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.released += len(p.IDs)
	return int64(len(p.IDs)), nil
}

// Heartbeat finds the heartbeat there, and ReleaseDeadRelays no dead
// relay: liveness is the heartbeat tests'.
func (*instantDriver) Heartbeat(context.Context, outboxdriver.HeartbeatParams) (bool, error) {
	return true, nil
}

func (*instantDriver) ReleaseDeadRelays(context.Context, outboxdriver.ReleaseDeadRelaysParams) ([]outboxdriver.ReleasedRelay, error) {
	return nil, nil
}

func (*instantDriver) EndHeartbeat(context.Context, string) error { return nil }

func (d *instantDriver) releasedCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.released
}

// recorded returns the outcome statements issued and the outcomes they
// recorded.
func (d *instantDriver) recorded() (statements, outcomes int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range d.batches {
		outcomes += n
	}
	return len(d.batches), outcomes
}

// fakeStore is a store on driver, with clock (nil: the system clock).
func fakeStore(t testing.TB, driver outboxdriver.Driver[fakeTx], clock outbox.Clock) *outbox.Store[fakeTx] {
	t.Helper()
	store, err := outbox.NewStore(driver, outbox.StoreConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// subscribeOrders subscribes to "orders" with a subscriber of cfg on
// driver; the subscriber is closed at cleanup, on cfg's clock when it is a
// test clock.
func subscribeOrders(t *testing.T, driver outboxdriver.Driver[fakeTx], cfg SubscriberConfig) (*Subscriber, <-chan *message.Message) {
	t.Helper()
	sub, err := NewSubscriber(fakeStore(t, driver, cfg.Clock), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if clock, ok := cfg.Clock.(*clocktest.Clock); ok {
			_ = closeOnClock(t, sub, clock)
			return
		}
		_ = sub.Close()
	})
	msgs, err := sub.Subscribe(t.Context(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	return sub, msgs
}

// orderRow is an event of "orders", claimed until lockedUntil.
func orderRow(id string, lockedUntil time.Time) outboxdriver.Row {
	return outboxdriver.Row{ID: id, Type: "OrderCreated", Topic: "orders", AggregateType: string(outbox.GlobalAggregate),
		Payload: []byte(`{}`), PayloadJSON: true, Status: int16(outbox.StatusNew), LockedUntil: lockedUntil}
}

// waitFor waits for cond, failing the test after waitLimit.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// advanceUntil waits for cond, moving clock forward by step between two
// looks, and fails the test after waitLimit.
func advanceUntil(t testing.TB, clock *clocktest.Clock, step time.Duration, what string, cond func() bool) {
	t.Helper()
	waitFor(t, what, func() bool {
		if cond() {
			return true
		}
		clock.Advance(step)
		return false
	})
}

// waitForTimer waits until a goroutine waits on clock for d, failing the
// test after waitLimit.
func waitForTimer(t testing.TB, clock *clocktest.Clock, d time.Duration) {
	t.Helper()
	if !clock.WaitForTimer(d, waitLimit) {
		t.Fatalf("nothing waits for %s; the clock's timers: %v", d, clock.Armed())
	}
}

// runClockUntil moves clock to its earliest timer, again and again, until
// done closes, failing the test after waitLimit: every wait of the relay
// ends at once, in order.
func runClockUntil(t testing.TB, clock *clocktest.Clock, done <-chan struct{}) {
	t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		select {
		case <-done:
			return
		case <-deadline.C:
			t.Fatalf("still running after %s; the clock's timers: %v", waitLimit, clock.Armed())
		default:
		}
		if next, ok := clock.Next(); ok {
			clock.Set(next)
		} else {
			clock.WaitForTimers(1, time.Millisecond)
		}
	}
}

// closeOnClock closes sub while running its clock, so that the waits of
// Close (DrainTimeout, the settler's pauses) end, and returns what Close
// returns.
func closeOnClock(t testing.TB, sub *Subscriber, clock *clocktest.Clock) error {
	t.Helper()
	return onClock(t, clock, sub.Close)
}

// onClock calls fn while running clock, and returns what fn returns.
func onClock(t testing.TB, clock *clocktest.Clock, fn func() error) error {
	t.Helper()
	var err error
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		err = fn()
	}()
	runClockUntil(t, clock, returned)
	return err
}

// receive returns the next message of msgs, failing the test with what
// after waitLimit.
func receive(t testing.TB, msgs <-chan *message.Message, what string) *message.Message {
	t.Helper()
	select {
	case msg := <-msgs:
		return msg
	case <-time.After(waitLimit):
		t.Fatalf("no message: %s", what)
		return nil
	}
}

// eventID names the nth event: event-000001, event-000002..., which sort
// in the order they are named.
func eventID(n int) string { return fmt.Sprintf("event-%06d", n) }

// insertDriver keeps the rows written through it, as a table would.
type insertDriver struct {
	instantDriver
	rows []outboxdriver.InsertRow // under instantDriver.mu
}

func (d *insertDriver) Insert(_ context.Context, _ fakeTx, p *outboxdriver.InsertParams) (outboxdriver.InsertResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rows = append(d.rows, p.Rows...)
	return outboxdriver.InsertResult{}, nil
}

// storedRow is the row r wrote, as a claim reads it back.
func storedRow(r *outboxdriver.InsertRow) outboxdriver.Row {
	return outboxdriver.Row{ID: r.ID, Type: r.Type, Topic: r.Topic, AggregateType: r.AggregateType,
		AggregateID: r.AggregateID, TenantID: r.TenantID, Payload: r.Payload, PayloadJSON: r.PayloadJSON,
		Headers: r.Headers, Status: int16(outbox.StatusNew), OccurredAt: r.OccurredAt, AvailableAt: r.AvailableAt,
		IdempotencyKey: r.IdempotencyKey}
}
