package outbox_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	policy := outbox.Backoff{Base: time.Second, MaxAttempts: 3, NoJitter: true}
	failed := errors.New("broker down")
	later := outbox.RetryAfter(time.Minute, errors.New("rate limited"))
	tests := []struct {
		name    string
		attempt int
		err     error
		want    outbox.StatusUpdate
	}{
		{"delivered", 1, nil, outbox.Done("e")},
		{"failed, attempts left", 2, failed, outbox.Retry("e", now.Add(2*time.Second), failed)},
		{"failed, no attempt left", 3, failed, outbox.Dead("e", failed)},
		{"permanent", 1, outbox.Permanent(failed), outbox.Dead("e", outbox.Permanent(failed))},
		{"retry after, even with no attempt left", 3, later, outbox.Defer("e", now.Add(time.Minute), later)},
		{"retry after wrapping a permanent error", 1, outbox.RetryAfter(time.Minute, outbox.Permanent(failed)),
			outbox.Defer("e", now.Add(time.Minute), outbox.RetryAfter(time.Minute, outbox.Permanent(failed)))},
		{"permanent wrapping a retry after", 1, outbox.Permanent(later), outbox.Defer("e", now.Add(time.Minute), outbox.Permanent(later))},
		{"retry after in a wrapped chain", 1, fmt.Errorf("handler: %w", later), outbox.Defer("e", now.Add(time.Minute), fmt.Errorf("handler: %w", later))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if tt.err != nil {
				want.Attempt = tt.attempt // a failure says which attempt it reports
			}
			require.Equal(t, want, outbox.Decide("e", tt.attempt, tt.err, policy, now))
		})
	}
}
