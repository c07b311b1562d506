package outboxtest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outboxtest"
)

var start = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

// fired reports whether timer has fired, without waiting, and takes the
// time it sent.
func fired(timer outbox.Timer) (time.Time, bool) {
	select {
	case at := <-timer.C():
		return at, true
	default:
		return time.Time{}, false
	}
}

func TestNewCutsToMicroseconds(t *testing.T) {
	t.Parallel()
	clock := outboxtest.NewClock(start.Add(1500 * time.Nanosecond))
	require.Equal(t, start.Add(time.Microsecond), clock.Now())
}

func TestAdvanceFiresTheTimersDueByThen(t *testing.T) {
	t.Parallel()
	clock := outboxtest.NewClock(start)
	second, minute := clock.NewTimer(time.Second), clock.NewTimer(time.Minute)
	require.Equal(t, 2, clock.Timers())
	next, ok := clock.Next()
	require.True(t, ok)
	require.Equal(t, start.Add(time.Second), next)

	clock.Advance(999 * time.Millisecond)
	_, ok = fired(second)
	require.False(t, ok, "a timer does not fire before its time")

	now := clock.Advance(time.Millisecond)
	at, ok := fired(second)
	require.True(t, ok, "a timer fires at its time")
	require.Equal(t, now, at, "with the clock's time")
	_, ok = fired(minute)
	require.False(t, ok)
	require.Equal(t, 1, clock.Timers(), "a fired timer is disarmed")

	clock.Advance(time.Hour)
	_, ok = fired(minute)
	require.True(t, ok, "a timer fires when the clock moves past its time")
	require.Zero(t, clock.Timers())
	_, ok = clock.Next()
	require.False(t, ok)
}

func TestSetMovesBothWays(t *testing.T) {
	t.Parallel()
	clock := outboxtest.NewClock(start)
	timer := clock.NewTimer(time.Minute)
	clock.Set(start.Add(-time.Hour))
	require.Equal(t, start.Add(-time.Hour), clock.Now())
	_, ok := fired(timer)
	require.False(t, ok, "a step back fires nothing")
	clock.Set(start.Add(time.Minute))
	_, ok = fired(timer)
	require.True(t, ok, "the timer keeps its time across the step back")
}

func TestTimerForNoTimeFiresAtOnce(t *testing.T) {
	t.Parallel()
	clock := outboxtest.NewClock(start)
	for _, d := range []time.Duration{0, -time.Second} {
		at, ok := fired(clock.NewTimer(d))
		require.True(t, ok, "timer for %s", d)
		require.Equal(t, start, at)
	}
	require.Zero(t, clock.Timers())
}

// Reset and Stop behave as a Go 1.23 time.Timer's: they report whether
// the timer was armed, and leave no value sent and not received in its
// channel.
func TestResetAndStopLeaveNoStaleValue(t *testing.T) {
	t.Parallel()
	clock := outboxtest.NewClock(start)
	timer := clock.NewTimer(time.Second)
	require.True(t, timer.Reset(time.Minute), "armed")
	clock.Advance(time.Second)
	_, ok := fired(timer)
	require.False(t, ok, "Reset moved the timer")

	clock.Advance(time.Minute) // fires, and nobody receives
	require.False(t, timer.Reset(time.Second), "fired: not armed")
	_, ok = fired(timer)
	require.False(t, ok, "Reset dropped the value sent before it")
	clock.Advance(time.Second)
	_, ok = fired(timer)
	require.True(t, ok)

	require.False(t, timer.Stop(), "fired and received: not armed")
	timer.Reset(time.Second)
	require.True(t, timer.Stop(), "armed")
	require.Zero(t, clock.Timers())
	clock.Advance(time.Hour)
	_, ok = fired(timer)
	require.False(t, ok, "a stopped timer does not fire")

	timer.Reset(time.Second)
	clock.Advance(time.Second)
	require.False(t, timer.Stop())
	_, ok = fired(timer)
	require.False(t, ok, "Stop dropped the value sent before it")
}

func TestTimersOfOneTimeFireInTheOrderArmed(t *testing.T) {
	t.Parallel()
	clock := outboxtest.NewClock(start)
	first, second := clock.NewTimer(time.Second), clock.NewTimer(time.Second)
	require.Equal(t, []time.Duration{time.Second, time.Second}, clock.Armed())
	require.True(t, first.Stop())
	require.Equal(t, 1, clock.Timers())
	clock.Advance(time.Second)
	_, ok := fired(second)
	require.True(t, ok)
}

// The waits return once a goroutine has armed what they wait for, and
// report false after their timeout otherwise.
func TestWaitsForTimers(t *testing.T) {
	t.Parallel()
	clock := outboxtest.NewClock(start)
	require.False(t, clock.WaitForTimers(1, time.Millisecond))
	require.False(t, clock.WaitForTimer(time.Minute, time.Millisecond))
	require.False(t, clock.WaitForTimerAt(start.Add(time.Minute), time.Millisecond))

	done := make(chan struct{})
	go func() {
		defer close(done)
		poll := clock.NewTimer(time.Second)
		<-poll.C()
		linger := clock.NewTimer(time.Minute)
		<-linger.C()
	}()
	require.True(t, clock.WaitForTimers(1, 10*time.Second))
	require.True(t, clock.WaitForTimer(time.Second, 10*time.Second))
	require.True(t, clock.WaitForTimerAt(start.Add(time.Second), 10*time.Second))
	require.False(t, clock.WaitForTimer(time.Minute, time.Millisecond), "not armed yet")
	require.True(t, clock.WaitForTimersOf(1, time.Second, 10*time.Second))
	other := clock.NewTimer(time.Second)
	require.True(t, clock.WaitForTimersOf(2, time.Second, 10*time.Second))
	require.False(t, clock.WaitForTimersOf(3, time.Second, time.Millisecond))
	other.Stop()

	clock.Advance(time.Second)
	require.True(t, clock.WaitForTimer(time.Minute, 10*time.Second), "armed after the first fired")
	require.True(t, clock.WaitForTimerAt(start.Add(time.Second+time.Minute), 10*time.Second))
	require.False(t, clock.WaitForTimer(time.Second, time.Millisecond), "fired")
	clock.Advance(time.Minute)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the goroutine's timers did not fire")
	}
}
