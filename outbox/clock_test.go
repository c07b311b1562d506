package outbox_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
)

var _ outbox.Clock = outbox.SystemClock{}

func TestSystemClock(t *testing.T) {
	t.Parallel()

	var clock outbox.SystemClock
	before := time.Now()
	require.WithinRange(t, clock.Now(), before, time.Now())

	fired := clock.NewTimer(0)
	select {
	case <-fired.C():
	case <-time.After(time.Minute):
		t.Fatal("a timer for 0 does not fire")
	}
	require.False(t, fired.Stop(), "a timer that fired is no longer armed")

	long := clock.NewTimer(time.Hour)
	require.True(t, long.Stop(), "a timer that has not fired is armed")
	require.False(t, long.Reset(0), "a stopped timer is not armed")
	select {
	case <-long.C():
	case <-time.After(time.Minute):
		t.Fatal("a timer reset to 0 does not fire")
	}
}
