package outboxtest

import (
	"slices"
	"sync"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// Clock is an [outbox.Clock] that stands still until the test moves it,
// with timers that fire when [Clock.Advance] or [Clock.Set] moves it to or
// past their time. Give it to the store (the dialect's Config.Clock) and
// to the relay (watermilladapter.SubscriberConfig.Clock): retries, delayed
// events, polls and leases then come due when the test says, not after
// real time. It is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*timer // armed, earliest first
	changed chan struct{}
}

var _ outbox.Clock = (*Clock)(nil)

// NewClock returns a clock set to start, cut to microseconds as the
// stores keep times, so that times read back compare equal.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start.Truncate(time.Microsecond), changed: make(chan struct{})}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d, fires the timers due by then, and
// returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fire()
	return c.now
}

// Set moves the clock to t, backwards too, and fires the timers due by
// then.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	c.fire()
}

// NewTimer returns a timer that fires once the clock has moved d past now.
// A timer for d <= 0 fires at once.
func (c *Clock) NewTimer(d time.Duration) outbox.Timer {
	t := &timer{clock: c, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Timers returns how many timers are armed: a goroutine that waits on one
// has reached its wait.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitForTimers waits until at least n timers are armed, or until timeout
// has passed in real time, and reports whether they are: a test advances
// the clock once the goroutines it drives wait for it.
func (c *Clock) WaitForTimers(n int, timeout time.Duration) bool {
	return c.waitFor(timeout, func() bool { return len(c.timers) >= n })
}

// WaitForTimer waits until a timer armed for d (by NewTimer or Reset) is
// armed, or until timeout has passed in real time, and reports whether it
// is: a goroutine that waits for d, as a poll interval, a lease or a
// linger, has reached its wait, whatever other timers come and go.
func (c *Clock) WaitForTimer(d, timeout time.Duration) bool {
	return c.waitFor(timeout, func() bool {
		return slices.ContainsFunc(c.timers, func(t *timer) bool { return t.d == d })
	})
}

// WaitForTimersOf waits until at least n timers armed for d are armed, or
// until timeout has passed in real time, and reports whether they are:
// n goroutines wait for d.
func (c *Clock) WaitForTimersOf(n int, d, timeout time.Duration) bool {
	return c.waitFor(timeout, func() bool {
		armed := 0
		for _, t := range c.timers {
			if t.d == d {
				armed++
			}
		}
		return armed >= n
	})
}

// WaitForTimerAt waits until a timer that fires at at is armed, or until
// timeout has passed in real time, and reports whether it is.
func (c *Clock) WaitForTimerAt(at time.Time, timeout time.Duration) bool {
	return c.waitFor(timeout, func() bool {
		return slices.ContainsFunc(c.timers, func(t *timer) bool { return t.at.Equal(at) })
	})
}

// waitFor waits until cond, called with c.mu held, holds, or until
// timeout has passed in real time, and reports whether it holds.
func (c *Clock) waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok, changed := cond(), c.changed
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		}
	}
}

// Armed returns how long each armed timer was armed for, earliest first:
// for a test's failure message.
func (c *Clock) Armed() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	armed := make([]time.Duration, len(c.timers))
	for i, t := range c.timers {
		armed[i] = t.d
	}
	return armed
}

// Next returns the time of the earliest armed timer, and false when none
// is armed.
func (c *Clock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	return c.timers[0].at, true
}

// fire sends on the timers due by now and disarms them. c.mu is held.
func (c *Clock) fire() {
	for len(c.timers) > 0 && !c.timers[0].at.After(c.now) {
		t := c.timers[0]
		c.timers = c.timers[1:]
		select {
		case t.c <- c.now:
		default:
		}
	}
	c.notify()
}

// notify wakes WaitForTimers. c.mu is held.
func (c *Clock) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// disarm removes t from the armed timers and reports whether it was armed.
// c.mu is held.
func (c *Clock) disarm(t *timer) bool {
	i := slices.Index(c.timers, t)
	if i < 0 {
		return false
	}
	c.timers = slices.Delete(c.timers, i, i+1)
	c.notify()
	return true
}

type timer struct {
	clock *Clock
	c     chan time.Time
	at    time.Time
	d     time.Duration // what it was armed for
}

func (t *timer) C() <-chan time.Time { return t.c }

// Reset arms the timer to fire d from now, dropping a value it sent and
// nobody received, as a Go 1.23 time.Timer does, and reports whether it
// was armed.
func (t *timer) Reset(d time.Duration) bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	armed := c.disarm(t)
	t.drain()
	t.at, t.d = c.now.Add(d), d
	if d <= 0 {
		t.c <- c.now
		c.notify()
		return armed
	}
	i, _ := slices.BinarySearchFunc(c.timers, t.at, func(o *timer, at time.Time) int {
		if o.at.After(at) {
			return 1
		}
		return -1 // after the timers of the same time
	})
	c.timers = slices.Insert(c.timers, i, t)
	c.notify()
	return armed
}

// Stop disarms the timer, dropping a value it sent and nobody received,
// and reports whether it was armed.
func (t *timer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	t.drain()
	return c.disarm(t)
}

func (t *timer) drain() {
	select {
	case <-t.c:
	default:
	}
}
