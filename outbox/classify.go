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

// Decide turns the outcome of delivery attempt number attempt (1 for the
// first) into the status update to record: DONE for a nil err; a deferral
// for [RetryAfter]; DEAD for a [Permanent] error or when policy has no
// attempts left; RETRY otherwise, each with its Attempt set. now is when
// the outcome is known. An
// error carrying both a RetryAfter and a Permanent mark, whichever wraps
// the other, is deferred: a deferral costs one more delivery, while DEAD
// would stop one that was asked for.
func Decide(id string, attempt int, err error, policy RetryPolicy, now time.Time) StatusUpdate {
	if err == nil {
		return Done(id)
	}
	u := decideFailure(id, attempt, err, policy, now)
	u.Attempt = attempt
	return u
}

func decideFailure(id string, attempt int, err error, policy RetryPolicy, now time.Time) StatusUpdate {
	if d, ok := RetryAfterDelay(err); ok {
		return Defer(id, now.Add(d), err)
	}
	if IsPermanent(err) {
		return Dead(id, err)
	}
	delay, ok := policy.NextRetry(attempt)
	if !ok {
		return Dead(id, err)
	}
	return Retry(id, now.Add(delay), err)
}
