package outboxdriver_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

func TestLogSlotConfirmedAge(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name      string
		confirmed time.Time
		want      time.Duration
	}{
		{"never confirmed", time.Time{}, 0},
		{"confirmed before", now.Add(-90 * time.Second), 90 * time.Second},
		{"confirmed now", now, 0},
		{"a clock ahead", now.Add(time.Second), 0},
	} {
		require.Equal(t, tt.want, outboxdriver.LogSlot{ConfirmedAt: tt.confirmed}.ConfirmedAge(now), tt.name)
	}
}
