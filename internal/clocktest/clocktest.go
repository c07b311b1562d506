// Package clocktest provides a clock that tests move by hand.
package clocktest

import (
	"sync"
	"time"
)

// Clock is an outbox.Clock that stands still until told to move. It is safe
// for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock set to start, cut to microseconds as PostgreSQL
// stores times, so that times read back compare equal.
func New(start time.Time) *Clock {
	return &Clock{now: start.Truncate(time.Microsecond)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}
