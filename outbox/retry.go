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

// Defaults of [Backoff], from the specification.
const (
	DefaultBackoffBase = 200 * time.Millisecond
	DefaultBackoffMax  = 60 * time.Second
	DefaultMaxAttempts = 10
)

// Backoff is exponential backoff with jitter: after failure n the delay is
// min(Max, Base·2ⁿ⁻¹) multiplied by a random factor in [0.5, 1.5), and the
// event goes DEAD on failure number MaxAttempts. The zero value is the
// specification's default policy (200 ms, 60 s, 10 attempts, jitter).
//
// The order service's schedule (100 ms, 200 ms, 400 ms, ..., 5 attempts, no
// jitter) is Backoff{Base: 100 * time.Millisecond, MaxAttempts: 5,
// NoJitter: true}.
type Backoff struct {
	// Base is the first delay. Default [DefaultBackoffBase].
	Base time.Duration
	// Max caps the delay before jitter. Default [DefaultBackoffMax].
	Max time.Duration
	// MaxAttempts is the number of failed attempts after which the event
	// is DEAD. Default [DefaultMaxAttempts].
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
		maxAttempts = DefaultMaxAttempts
	}
	if attempts >= maxAttempts {
		return 0, false
	}
	base, limit := b.Base, b.Max
	if base <= 0 {
		base = DefaultBackoffBase
	}
	if limit <= 0 {
		limit = DefaultBackoffMax
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
