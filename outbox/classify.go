package outbox

import (
	"errors"
	"time"
)

// Permanent marks err as a failure that retrying cannot fix (a payload the
// consumer rejects, a schema violation): the event goes DEAD at once with
// err as its last_error, without spending the remaining attempts. It
// returns nil for a nil err.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked by
// [Permanent].
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// RetryAfter asks for the event to be delivered again after d without
// spending an attempt (the consumer is rate limited, a dependency said
// "come back later"). The error's text, "retry after d: " and reason's (or
// "retry after d" when reason is nil), becomes the event's last_error.
func RetryAfter(d time.Duration, reason error) error {
	return &retryAfterError{after: d, reason: reason}
}

// RetryAfterDelay reports the delay requested by [RetryAfter] in err's
// chain.
func RetryAfterDelay(err error) (time.Duration, bool) {
	var r *retryAfterError
	if !errors.As(err, &r) {
		return 0, false
	}
	return max(r.after, 0), true
}

type retryAfterError struct {
	after  time.Duration
	reason error
}

func (e *retryAfterError) Error() string {
	if e.reason == nil {
		return "retry after " + e.after.String()
	}
	return "retry after " + e.after.String() + ": " + e.reason.Error()
}

func (e *retryAfterError) Unwrap() error { return e.reason }
