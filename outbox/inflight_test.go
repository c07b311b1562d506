package outbox_test

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

	f := outbox.NewInFlight(0, nil)
	require.Equal(t, 0, f.Len())

	require.True(t, f.TryAcquire("a"))
	require.False(t, f.TryAcquire("a"), "second acquire of the same id")
	require.True(t, f.TryAcquire("b"))
	require.Equal(t, 2, f.Len())

	f.Release("a")
	require.Equal(t, 1, f.Len())
	require.True(t, f.TryAcquire("a"), "released ids can be acquired again")
	require.False(t, f.TryAcquire("b"))

	f.Release("unknown") // no-op
	f.Release("a")
	f.Release("a")
	f.Release("b")
	require.Equal(t, 0, f.Len())
}

func TestInFlightWithoutTTLNeverExpires(t *testing.T) {
	t.Parallel()

	clock := clocktest.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	f := outbox.NewInFlight(0, clock)
	require.True(t, f.TryAcquire("a"))
	clock.Advance(365 * 24 * time.Hour)
	require.False(t, f.TryAcquire("a"))
}

func TestInFlightTTL(t *testing.T) {
	t.Parallel()

	const ttl = time.Minute
	clock := clocktest.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	f := outbox.NewInFlight(ttl, clock)

	require.True(t, f.TryAcquire("a"))
	clock.Advance(ttl - time.Nanosecond)
	require.False(t, f.TryAcquire("a"), "entry still fresh")
	require.True(t, f.TryAcquire("b"))

	clock.Advance(time.Nanosecond)
	require.True(t, f.TryAcquire("a"), "entry expired after the TTL")
	require.False(t, f.TryAcquire("a"), "the new entry is fresh again")
	require.False(t, f.TryAcquire("b"), "b was taken later and is still fresh")
	require.Equal(t, 2, f.Len(), "expired entries are replaced, not added")

	clock.Advance(ttl)
	require.True(t, f.TryAcquire("b"))
	f.Release("a")
	require.True(t, f.TryAcquire("a"))
}

// TestInFlightStaleReleaseKeepsTheNewHolder: a holder that outlived the
// TTL lost the id to a new holder; its late Release must not end the new
// holder's tracking and let a third worker in.
func TestInFlightStaleReleaseKeepsTheNewHolder(t *testing.T) {
	t.Parallel()

	const ttl = time.Minute
	clock := clocktest.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	f := outbox.NewInFlight(ttl, clock)

	require.True(t, f.TryAcquire("a"), "first holder")
	clock.Advance(ttl)
	require.True(t, f.TryAcquire("a"), "second holder, after the first one's entry expired")
	f.Release("a") // the first holder, finishing late
	require.False(t, f.TryAcquire("a"), "the second holder still has it")

	f.Release("a") // the second holder
	require.True(t, f.TryAcquire("a"), "free once both have released")
	f.Release("a")
	require.Equal(t, 0, f.Len())
}

func TestInFlightConcurrentAcquire(t *testing.T) {
	t.Parallel()

	f := outbox.NewInFlight(time.Hour, nil)
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
			if f.TryAcquire("event-1") {
				wins.Add(1)
			}
		})
	}
	start.Wait()
	close(ready)
	done.Wait()

	require.Equal(t, int32(1), wins.Load())
	require.Equal(t, 1, f.Len())
}

func TestInFlightConcurrentAcquireRelease(t *testing.T) {
	t.Parallel()

	f := outbox.NewInFlight(0, nil)
	var (
		wg      sync.WaitGroup
		holder  atomic.Int32 // how many goroutines hold "x" now
		overlap atomic.Int32 // times two goroutines held "x" at once
		held    atomic.Int32 // successful acquires
	)
	for range 20 {
		wg.Go(func() {
			for range 200 {
				if !f.TryAcquire("x") {
					continue
				}
				held.Add(1)
				if holder.Add(1) > 1 {
					overlap.Add(1)
				}
				holder.Add(-1)
				f.Release("x")
			}
		})
	}
	wg.Wait()
	require.Zero(t, overlap.Load(), "never two holders at once")
	require.Positive(t, held.Load())
	require.Equal(t, 0, f.Len())
}
