package outbox

import "time"

// Clock tells the time. Stores, writers and relays take one so that tests
// can control backoff, delayed delivery and lock expiry. Nil means
// [SystemClock].
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// ClockOrSystem returns c, or [SystemClock] when c is nil.
func ClockOrSystem(c Clock) Clock {
	if c == nil {
		return SystemClock{}
	}
	return c
}
