package outbox

import (
	"time"

	"github.com/wmoutbox/wmoutbox/internal/nilcheck"
)

// Clock tells the time and makes timers. A store, and the writers and
// relays built on it, take one, so that tests can move time for backoff,
// polling, delayed delivery and leases instead of waiting for it. Nil
// means [SystemClock].
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once d has passed on this
	// clock, as time.NewTimer does.
	NewTimer(d time.Duration) Timer
}

// Timer is a timer of a [Clock], with the methods of *time.Timer (whose
// Go 1.23 semantics it has: Reset and Stop leave no stale value in C).
type Timer interface {
	C() <-chan time.Time
	Reset(d time.Duration) bool
	Stop() bool
}

// SystemClock is the wall clock and the runtime's timers.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns a time.Timer.
func (SystemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.Timer.C }

// clockOrSystem returns c, or [SystemClock] when c is nil.
func clockOrSystem(c Clock) Clock {
	if nilcheck.Is(c) {
		return SystemClock{}
	}
	return c
}
