package watermilladapter

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/outbox"
)

func TestInFlight(t *testing.T) {
	t.Parallel()

	f := newInFlight(0, outbox.SystemClock{})
	require.Equal(t, 0, f.len())

	require.True(t, f.tryAcquire("a"))
	require.False(t, f.tryAcquire("a"), "second acquire of the same id")
	require.True(t, f.tryAcquire("b"))
	require.Equal(t, 2, f.len())

	f.release("a")
	require.Equal(t, 1, f.len())
	require.True(t, f.tryAcquire("a"), "released ids can be acquired again")
	require.False(t, f.tryAcquire("b"))

	f.release("unknown") // no-op
	f.release("a")
	f.release("a")
	f.release("b")
	require.Equal(t, 0, f.len())
}

func TestInFlightWithoutTTLNeverExpires(t *testing.T) {
	t.Parallel()

	clock := clocktest.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	f := newInFlight(0, clock)
	require.True(t, f.tryAcquire("a"))
	clock.Advance(365 * 24 * time.Hour)
	require.False(t, f.tryAcquire("a"))
}

func TestInFlightTTL(t *testing.T) {
	t.Parallel()

	const ttl = time.Minute
	clock := clocktest.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	f := newInFlight(ttl, clock)

	require.True(t, f.tryAcquire("a"))
	clock.Advance(ttl - time.Nanosecond)
	require.False(t, f.tryAcquire("a"), "entry still fresh")
	require.True(t, f.tryAcquire("b"))

	clock.Advance(time.Nanosecond)
	require.True(t, f.tryAcquire("a"), "entry expired after the TTL")
	require.False(t, f.tryAcquire("a"), "the new entry is fresh again")
	require.False(t, f.tryAcquire("b"), "b was taken later and is still fresh")
	require.Equal(t, 2, f.len(), "expired entries are replaced, not added")

	clock.Advance(ttl)
	require.True(t, f.tryAcquire("b"))
	f.release("a")
	require.True(t, f.tryAcquire("a"))
}

// TestInFlightStaleReleaseKeepsTheNewHolder: a holder that outlived the
// TTL lost the id to a new holder; its late Release must not end the new
// holder's tracking and let a third worker in.
func TestInFlightStaleReleaseKeepsTheNewHolder(t *testing.T) {
	t.Parallel()

	const ttl = time.Minute
	clock := clocktest.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	f := newInFlight(ttl, clock)

	require.True(t, f.tryAcquire("a"), "first holder")
	clock.Advance(ttl)
	require.True(t, f.tryAcquire("a"), "second holder, after the first one's entry expired")
	f.release("a") // the first holder, finishing late
	require.False(t, f.tryAcquire("a"), "the second holder still has it")

	f.release("a") // the second holder
	require.True(t, f.tryAcquire("a"), "free once both have released")
	f.release("a")
	require.Equal(t, 0, f.len())
}

func TestInFlightConcurrentAcquire(t *testing.T) {
	t.Parallel()

	f := newInFlight(time.Hour, outbox.SystemClock{})
	var (
		start sync.WaitGroup
		done  sync.WaitGroup
		wins  atomic.Int32
		ready = make(chan struct{})
	)
	start.Add(50)
	for range 50 {
		done.Go(func() {
			start.Done()
			<-ready
			if f.tryAcquire("event-1") {
				wins.Add(1)
			}
		})
	}
	start.Wait()
	close(ready)
	done.Wait()

	require.Equal(t, int32(1), wins.Load())
	require.Equal(t, 1, f.len())
}

func TestInFlightConcurrentAcquireRelease(t *testing.T) {
	t.Parallel()

	f := newInFlight(0, outbox.SystemClock{})
	var (
		wg      sync.WaitGroup
		holder  atomic.Int32 // how many goroutines hold "x" now
		overlap atomic.Int32 // times two goroutines held "x" at once
		held    atomic.Int32 // successful acquires
	)
	for range 20 {
		wg.Go(func() {
			for range 200 {
				if !f.tryAcquire("x") {
					continue
				}
				held.Add(1)
				if holder.Add(1) > 1 {
					overlap.Add(1)
				}
				holder.Add(-1)
				f.release("x")
			}
		})
	}
	wg.Wait()
	require.Zero(t, overlap.Load(), "never two holders at once")
	require.Positive(t, held.Load())
	require.Equal(t, 0, f.len())
}
