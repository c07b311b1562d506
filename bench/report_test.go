package main

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestComparedToShowsTheRangeOfTheRepetitions: a ratio is the median of
// the repetitions' ratios, printed with their range, which tells how noisy
// the machine was; one repetition has no range.
func TestComparedToShowsTheRangeOfTheRepetitions(t *testing.T) {
	perSecond := func(rates ...int) *series {
		s := &series{}
		for _, r := range rates {
			s.windows = append(s.windows, window{events: r, elapsed: time.Second})
		}
		return s
	}
	base := perSecond(1000, 2000, 1000)
	require.Equal(t, "0.90× raw insert (0.80–1.00)", perSecond(900, 1600, 1000).comparedTo(base, "raw insert"))
	require.Equal(t, "0.85× raw insert", perSecond(850).comparedTo(perSecond(1000), "raw insert"))
}

func TestStolenShare(t *testing.T) {
	start := cpuTimes{busy: 10 * time.Second, idle: 5 * time.Second, steal: time.Second}
	end := cpuTimes{busy: 16 * time.Second, idle: 7 * time.Second, steal: 3 * time.Second}
	require.InDelta(t, 0.2, end.stolenShare(start), 1e-9) // 2 s of 10
	require.Equal(t, -1.0, cpuTimes{}.stolenShare(cpuTimes{}), "unknown without /proc/stat")
	if runtime.GOOS == "linux" {
		require.Positive(t, readCPUTimes().busy, "read from /proc/stat")
	}
}
