package outbox

import (
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy decides what happens after a failed delivery.
type RetryPolicy interface {
	// NextRetry is called after failed attempt number attempts (1 for the
	// first failure). It returns how long to wait before the next attempt,
	// or ok=false when the event has no attempts left and goes DEAD.
	NextRetry(attempts int) (delay time.Duration, ok bool)
}

// Defaults of [Backoff].
const (
	defaultBackoffBase = 200 * time.Millisecond
	defaultBackoffMax  = 60 * time.Second
	defaultMaxAttempts = 10
)

// Backoff is exponential backoff with jitter: after failure n the delay is
// min(Max, Base·2ⁿ⁻¹) multiplied by a random factor in [0.5, 1.5), and the
// event goes DEAD on failure number MaxAttempts. The zero value is the
// default policy: 200 ms, 60 s, 10 attempts, jitter.
//
// A schedule of 100 ms doubling, without jitter, that gives up on the
// fifth failure is Backoff{Base: 100 * time.Millisecond, MaxAttempts: 5,
// NoJitter: true}; docs/coming-from.md maps other designs' schedules.
type Backoff struct {
	// Base is the first delay. Default 200ms.
	Base time.Duration
	// Max caps the delay before jitter. Default 60s.
	Max time.Duration
	// MaxAttempts is the number of failed attempts after which the event
	// is DEAD. Default 10.
	MaxAttempts int
	// NoJitter turns off the random factor.
	NoJitter bool
}

// Validate reports a negative field with an error matching
// [ErrInvalidRequest]; zero fields take their defaults.
func (b Backoff) Validate() error {
	switch {
	case b.Base < 0:
		return invalidRequest("backoff Base %s is negative", b.Base)
	case b.Max < 0:
		return invalidRequest("backoff Max %s is negative", b.Max)
	case b.MaxAttempts < 0:
		return invalidRequest("backoff MaxAttempts %d is negative", b.MaxAttempts)
	}
	return nil
}

// NextRetry implements [RetryPolicy].
func (b Backoff) NextRetry(attempts int) (time.Duration, bool) {
	maxAttempts := b.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = defaultMaxAttempts
	}
	if attempts >= maxAttempts {
		return 0, false
	}
	base, limit := b.Base, b.Max
	if base <= 0 {
		base = defaultBackoffBase
	}
	if limit <= 0 {
		limit = defaultBackoffMax
	}
	delay := min(base, limit)
	for i := 1; i < attempts && delay < limit; i++ {
		if delay > limit/2 {
			delay = limit
			break
		}
		delay *= 2
	}
	if !b.NoJitter {
		jittered := float64(delay) * (0.5 + rand.Float64())
		if jittered >= math.MaxInt64 {
			return time.Duration(math.MaxInt64), true
		}
		delay = time.Duration(jittered)
	}
	return delay, true
}
