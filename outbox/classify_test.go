package outbox_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
)

func TestPermanent(t *testing.T) {
	t.Parallel()

	require.NoError(t, outbox.Permanent(nil), "nil stays nil: nothing failed")

	cause := errors.New("schema violation")
	err := outbox.Permanent(cause)
	require.EqualError(t, err, "permanent: schema violation")
	require.ErrorIs(t, err, cause, "the cause is kept")

	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain error", cause, false},
		{"permanent", err, true},
		{"wrapped", fmt.Errorf("handler: %w", err), true},
		{"joined", errors.Join(errors.New("other"), err), true},
		{"retry after wrapping a permanent error", outbox.RetryAfter(time.Second, err), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, outbox.IsPermanent(tt.err))
		})
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()

	reason := errors.New("rate limited")
	tests := []retryMark{
		{name: "with a reason", err: outbox.RetryAfter(time.Minute, reason), text: "retry after 1m0s: rate limited",
			wantDelay: time.Minute, wantOK: true},
		{name: "without a reason", err: outbox.RetryAfter(1500*time.Millisecond, nil), text: "retry after 1.5s",
			wantDelay: 1500 * time.Millisecond, wantOK: true},
		{name: "negative delay is at once", err: outbox.RetryAfter(-time.Second, nil), text: "retry after -1s", wantOK: true},
		{name: "zero delay", err: outbox.RetryAfter(0, reason), text: "retry after 0s: rate limited", wantOK: true},
		{name: "wrapped", err: fmt.Errorf("handler: %w", outbox.RetryAfter(time.Minute, reason)),
			text: "handler: retry after 1m0s: rate limited", wantDelay: time.Minute, wantOK: true},
		{name: "permanent wrapping a retry after", err: outbox.Permanent(outbox.RetryAfter(time.Minute, nil)),
			wantDelay: time.Minute, wantOK: true},
		{name: "the outer one counts", err: outbox.RetryAfter(time.Second, outbox.RetryAfter(time.Hour, nil)),
			wantDelay: time.Second, wantOK: true},
		{name: "plain error", err: reason},
		{name: "nil", err: nil},
	}
	runRetryMarks(t, tests, outbox.RetryAfterDelay)

	require.ErrorIs(t, outbox.RetryAfter(time.Minute, reason), reason, "the reason is kept")
	require.False(t, outbox.IsPermanent(outbox.RetryAfter(time.Minute, reason)))
}

func TestFailRetryAfter(t *testing.T) {
	t.Parallel()

	reason := errors.New("downstream: HTTP 429")
	tests := []retryMark{
		{name: "with a reason", err: outbox.FailRetryAfter(time.Minute, reason), text: "failed, retry after 1m0s: downstream: HTTP 429",
			wantDelay: time.Minute, wantOK: true},
		{name: "without a reason", err: outbox.FailRetryAfter(1500*time.Millisecond, nil), text: "failed, retry after 1.5s",
			wantDelay: 1500 * time.Millisecond, wantOK: true},
		{name: "negative delay is at once", err: outbox.FailRetryAfter(-time.Second, nil), wantOK: true},
		{name: "wrapped", err: fmt.Errorf("handler: %w", outbox.FailRetryAfter(time.Minute, reason)),
			wantDelay: time.Minute, wantOK: true},
		{name: "the outer one counts", err: outbox.FailRetryAfter(time.Second, outbox.FailRetryAfter(time.Hour, nil)),
			wantDelay: time.Second, wantOK: true},
		{name: "a retry after is another mark", err: outbox.RetryAfter(time.Minute, reason)},
		{name: "plain error", err: reason},
		{name: "nil", err: nil},
	}
	runRetryMarks(t, tests, outbox.FailRetryAfterDelay)

	require.ErrorIs(t, outbox.FailRetryAfter(time.Minute, reason), reason, "the reason is kept")
	_, deferred := outbox.RetryAfterDelay(outbox.FailRetryAfter(time.Minute, reason))
	require.False(t, deferred, "no deferral: the attempt is spent")
	require.False(t, outbox.IsPermanent(outbox.FailRetryAfter(time.Minute, reason)))
}

// retryMark is a case of an error marked (or not) with a retry delay.
type retryMark struct {
	name      string
	err       error
	text      string // "" to leave unchecked
	wantDelay time.Duration
	wantOK    bool
}

// runRetryMarks checks the text of each case's error, and the delay read
// tells of it.
func runRetryMarks(t *testing.T, tests []retryMark, read func(error) (time.Duration, bool)) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			if tt.text != "" {
				require.EqualError(t, tt.err, tt.text)
			}
			delay, ok := read(tt.err)
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.wantDelay, delay)
		})
	}
}
