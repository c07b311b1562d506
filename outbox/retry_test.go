package outbox_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
)

var _ outbox.RetryPolicy = outbox.Backoff{}

// step is one call of NextRetry and what it should return.
type step struct {
	attempts int
	delay    time.Duration
	ok       bool
}

func TestBackoffSchedules(t *testing.T) {
	t.Parallel()

	const ms = time.Millisecond
	tests := []struct {
		name    string
		backoff outbox.Backoff
		steps   []step
	}{
		{
			name:    "spec defaults without jitter",
			backoff: outbox.Backoff{NoJitter: true},
			steps: []step{
				{1, 200 * ms, true}, {2, 400 * ms, true}, {3, 800 * ms, true},
				{4, 1600 * ms, true}, {5, 3200 * ms, true}, {6, 6400 * ms, true},
				{7, 12800 * ms, true}, {8, 25600 * ms, true}, {9, 51200 * ms, true},
				{10, 0, false}, {11, 0, false}, {100, 0, false},
			},
		},
		{
			name:    "default cap of 60 s",
			backoff: outbox.Backoff{NoJitter: true, MaxAttempts: 20},
			steps: []step{
				{9, 51200 * ms, true}, {10, 60 * time.Second, true}, {19, 60 * time.Second, true}, {20, 0, false},
			},
		},
		{
			name:    "order service",
			backoff: outbox.Backoff{Base: 100 * ms, MaxAttempts: 5, NoJitter: true},
			steps: []step{
				{1, 100 * ms, true}, {2, 200 * ms, true}, {3, 400 * ms, true}, {4, 800 * ms, true},
				{5, 0, false}, {6, 0, false},
			},
		},
		{
			name:    "custom cap",
			backoff: outbox.Backoff{Base: time.Second, Max: 5 * time.Second, NoJitter: true},
			steps:   []step{{1, time.Second, true}, {3, 4 * time.Second, true}, {4, 5 * time.Second, true}, {9, 5 * time.Second, true}},
		},
		{
			name:    "base above the cap",
			backoff: outbox.Backoff{Base: time.Minute, Max: time.Second, NoJitter: true},
			steps:   []step{{1, time.Second, true}, {2, time.Second, true}},
		},
		{
			name:    "one attempt only",
			backoff: outbox.Backoff{MaxAttempts: 1, NoJitter: true},
			steps:   []step{{1, 0, false}},
		},
		{
			name:    "negative fields mean defaults",
			backoff: outbox.Backoff{Base: -1, Max: -1, MaxAttempts: -1, NoJitter: true},
			steps:   []step{{1, 200 * ms, true}, {9, 51200 * ms, true}, {10, 0, false}},
		},
		{
			name:    "huge attempt numbers do not overflow",
			backoff: outbox.Backoff{MaxAttempts: 2000, NoJitter: true},
			steps:   []step{{63, 60 * time.Second, true}, {64, 60 * time.Second, true}, {1000, 60 * time.Second, true}, {1999, 60 * time.Second, true}, {2000, 0, false}},
		},
		{
			name:    "huge attempt numbers with a long cap",
			backoff: outbox.Backoff{Base: time.Nanosecond, Max: 1000 * time.Hour, MaxAttempts: 1 << 30, NoJitter: true},
			steps:   []step{{1, time.Nanosecond, true}, {1 << 29, 1000 * time.Hour, true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			for _, s := range tt.steps {
				delay, ok := tt.backoff.NextRetry(s.attempts)
				require.Equal(t, s.ok, ok, "attempts %d", s.attempts)
				if s.ok {
					require.Equal(t, s.delay, delay, "attempts %d", s.attempts)
				}
			}
		})
	}
}

func TestBackoffJitter(t *testing.T) {
	t.Parallel()

	tests := []struct {
		backoff outbox.Backoff
		nominal map[int]time.Duration // attempts -> delay without jitter
	}{
		{
			backoff: outbox.Backoff{},
			nominal: map[int]time.Duration{
				1: 200 * time.Millisecond, 2: 400 * time.Millisecond, 5: 3200 * time.Millisecond, 9: 51200 * time.Millisecond,
			},
		},
		{
			backoff: outbox.Backoff{MaxAttempts: 1000},
			nominal: map[int]time.Duration{20: 60 * time.Second, 999: 60 * time.Second},
		},
	}
	for _, tt := range tests {
		for attempts, nominal := range tt.nominal {
			t.Run(fmt.Sprintf("%+v/%d", tt.backoff, attempts), func(t *testing.T) {
				t.Parallel()

				const samples = 2000
				lo, hi := nominal/2, nominal*3/2
				seen := make(map[time.Duration]bool)
				farBelow, farAbove := false, false // in the outer quarters of the range
				for range samples {
					delay, ok := tt.backoff.NextRetry(attempts)
					require.True(t, ok)
					require.GreaterOrEqual(t, delay, lo)
					require.Less(t, delay, hi)
					seen[delay] = true
					farBelow = farBelow || delay < nominal*3/4
					farAbove = farAbove || delay > nominal*5/4
				}
				require.Greater(t, len(seen), samples/2, "jitter spreads the delays")
				// Each is missed by 2000 uniform samples with a chance of
				// 0.75^2000: jitter of ±25% or less is caught.
				require.True(t, farBelow && farAbove, "jitter spans ±50% of the nominal delay")
			})
		}
	}

	delay, ok := outbox.Backoff{}.NextRetry(10)
	require.False(t, ok, "jitter does not change when an event dies")
	require.Zero(t, delay)
}

func TestBackoffHugeMaxDoesNotOverflow(t *testing.T) {
	t.Parallel()
	b := outbox.Backoff{Base: time.Second, Max: math.MaxInt64, MaxAttempts: 100}
	for attempts := 1; attempts < 100; attempts++ {
		delay, ok := b.NextRetry(attempts)
		require.True(t, ok)
		require.GreaterOrEqual(t, delay, 500*time.Millisecond, "attempts %d", attempts)
		nominal, _ := outbox.Backoff{Base: time.Second, Max: math.MaxInt64, MaxAttempts: 100, NoJitter: true}.NextRetry(attempts)
		require.GreaterOrEqual(t, nominal, time.Second, "attempts %d", attempts)
	}
}

func TestBackoffValidate(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		backoff outbox.Backoff
		wantErr string // "" when valid
	}{
		{name: "zero value", backoff: outbox.Backoff{}},
		{name: "every field", backoff: outbox.Backoff{Base: time.Second, Max: time.Minute, MaxAttempts: 3, NoJitter: true}},
		{name: "negative base", backoff: outbox.Backoff{Base: -time.Second}, wantErr: "Base"},
		{name: "negative max", backoff: outbox.Backoff{Max: -time.Second}, wantErr: "Max"},
		{name: "negative attempts", backoff: outbox.Backoff{MaxAttempts: -1}, wantErr: "MaxAttempts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			err := tt.backoff.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, outbox.ErrInvalidRequest)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}
