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
// To count the delivery as a failed attempt, use [FailRetryAfter].
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

func (e *retryAfterError) Error() string { return retryText("retry after ", e.after, e.reason) }

func (e *retryAfterError) Unwrap() error { return e.reason }

// FailRetryAfter marks a failed delivery whose next attempt the handler
// schedules itself: the attempt is spent, as for any failure, but the
// event is due again after d instead of the [RetryPolicy]'s delay (a
// downstream answered HTTP 429 or 503 with a Retry-After). When the
// policy says no attempt is left, the event goes DEAD as after any
// failure. The error's text, "failed, retry after d: " and reason's (or
// "failed, retry after d" when reason is nil), becomes the event's
// last_error.
//
// Of an error chain holding several marks, a [RetryAfter] counts first,
// then a FailRetryAfter, then [Permanent]: a mark that asks for another
// delivery wins over one that stops them, and the outer one of two alike
// counts.
func FailRetryAfter(d time.Duration, reason error) error {
	return &failRetryAfterError{after: d, reason: reason}
}

// FailRetryAfterDelay reports the delay requested by [FailRetryAfter] in
// err's chain.
func FailRetryAfterDelay(err error) (time.Duration, bool) {
	var r *failRetryAfterError
	if !errors.As(err, &r) {
		return 0, false
	}
	return max(r.after, 0), true
}

type failRetryAfterError struct {
	after  time.Duration
	reason error
}

func (e *failRetryAfterError) Error() string {
	return retryText("failed, retry after ", e.after, e.reason)
}

func (e *failRetryAfterError) Unwrap() error { return e.reason }

// retryText is prefix, d and reason's text, as the retry marks spell them.
func retryText(prefix string, d time.Duration, reason error) string {
	if reason == nil {
		return prefix + d.String()
	}
	return prefix + d.String() + ": " + reason.Error()
}
