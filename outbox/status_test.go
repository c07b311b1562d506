package outbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
)

func TestStatus(t *testing.T) {
	t.Parallel()

	tests := []struct {
		status   outbox.Status
		code     int16
		name     string
		pending  bool
		terminal bool
	}{
		{outbox.StatusNew, 0, "NEW", true, false},
		{outbox.StatusDone, 1, "DONE", false, true},
		{outbox.StatusRetry, 2, "RETRY", true, false},
		{outbox.StatusDead, 3, "DEAD", false, true},
		{outbox.Status(4), 4, "Status(4)", false, false},
		{outbox.Status(-1), -1, "Status(-1)", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			require.Equal(t, tt.code, int16(tt.status), "stored codes are part of the table's contract")
			require.Equal(t, tt.name, tt.status.String())
			require.Equal(t, tt.pending, tt.status.Pending())
			require.Equal(t, tt.terminal, tt.status.Terminal())
		})
	}
}
