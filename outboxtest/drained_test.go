package outboxtest_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outboxtest"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// WaitDrained returns once the relay has handled what was published and
// recorded it: every event is DONE when it returns.
func TestWaitDrainedReturnsOnceEventsAreSettled(t *testing.T) {
	t.Parallel()
	store := newSQLiteStore(t, nil)
	var handled atomic.Int32
	r := startRelay(t, store, watermilladapter.SubscriberConfig{PollInterval: time.Hour}, "orders",
		func(*message.Message) error {
			handled.Add(1)
			return nil
		})
	r.publish(t, store, "orders", message.NewMessage(watermill.NewUUID(), []byte(`{"id":"o-1"}`)))
	write(t, store, orderCreated("o-2", 3)) // no hot path: claimed because WaitDrained wakes the relay

	outboxtest.WaitDrained(t, r.sub, waitLimit)
	require.EqualValues(t, 2, handled.Load())
	for _, e := range outboxtest.Written(t, store) {
		require.Equal(t, outbox.StatusDone, e.Status, e.ID)
	}
}

// WaitDrained fails the test, naming the busy topic, when an event stays
// in a handler.
func TestWaitDrainedTimesOut(t *testing.T) {
	t.Parallel()
	store := newSQLiteStore(t, nil)
	release := make(chan struct{})
	r := startRelay(t, store, watermilladapter.SubscriberConfig{PollInterval: time.Hour}, "orders",
		func(*message.Message) error {
			<-release
			return nil
		})
	t.Cleanup(func() { close(release) }) // before the relay closes
	r.publish(t, store, "orders", message.NewMessage(watermill.NewUUID(), []byte(`{"id":"o-1"}`)))

	msg := failure(t, func(t testing.TB) { outboxtest.WaitDrained(t, r.sub, 200*time.Millisecond) })
	require.Contains(t, msg, "outboxtest: relay not drained within 200ms")
	require.Contains(t, msg, `topic "orders": 1 pending`)
}

// A store and a relay on the kit's Clock deliver a retry when the test
// moves the clock past its backoff, not after real time.
func TestClockDrivesARetry(t *testing.T) {
	t.Parallel()
	clock := outboxtest.NewClock(start)
	store := newSQLiteStore(t, clock)
	const backoff = time.Hour // a test that waited for it would time out
	var tries atomic.Int32
	r := startRelay(t, store, watermilladapter.SubscriberConfig{
		Clock:       clock,
		RetryPolicy: outbox.Backoff{Base: backoff, Max: backoff, NoJitter: true},
	}, "orders", func(*message.Message) error {
		if tries.Add(1) == 1 {
			return errors.New("payment service unavailable")
		}
		return nil
	})
	r.publish(t, store, "orders", message.NewMessage(watermill.NewUUID(), []byte(`{"id":"o-1"}`)))

	outboxtest.WaitDrained(t, r.sub, waitLimit) // the retry is not due: drained
	e := outboxtest.RequireWritten(t, store, outboxtest.Want{Topic: "orders"})
	require.Equal(t, outbox.StatusRetry, e.Status)
	require.Equal(t, start.Add(backoff), e.AvailableAt)
	require.Contains(t, e.LastError, "payment service unavailable")

	clock.Advance(backoff)
	outboxtest.WaitDrained(t, r.sub, waitLimit)
	e = outboxtest.RequireWritten(t, store, outboxtest.Want{Topic: "orders"})
	require.Equal(t, outbox.StatusDone, e.Status)
	require.EqualValues(t, 2, tries.Load())
}

// On a clock that stands still, an event the relay was not told of waits
// for the claim WaitDrained asks for, which waits for WakeCooldown after
// the previous claim: the test moves the clock by it (docs/testing.md).
func TestClockEventsNotToldOfWaitForTheCooldown(t *testing.T) {
	t.Parallel()
	clock := outboxtest.NewClock(start)
	store := newSQLiteStore(t, clock)
	var handled atomic.Int32
	r := startRelay(t, store, watermilladapter.SubscriberConfig{Clock: clock, PollInterval: time.Hour}, "orders",
		func(*message.Message) error {
			handled.Add(1)
			return nil
		})
	require.True(t, clock.WaitForTimer(time.Hour, waitLimit), "the relay waits for its poll")
	write(t, store, orderCreated("o-1", 3))

	msg := failure(t, func(t testing.TB) { outboxtest.WaitDrained(t, r.sub, 200*time.Millisecond) })
	require.Contains(t, msg, `topic "orders": 1 pending`)
	clock.Advance(watermilladapter.DefaultWakeCooldown)
	outboxtest.WaitDrained(t, r.sub, waitLimit)
	require.EqualValues(t, 1, handled.Load())
}
