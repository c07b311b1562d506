package main

import (
	"runtime"
	"strconv"
	"strings"
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

// TestPercentileIsTheNearestRank: the p-th percentile of n values is the
// ⌈p·n/100⌉-th smallest, so that the p99 of 100 values is not their
// maximum.
func TestPercentileIsTheNearestRank(t *testing.T) {
	upTo := func(n int) []time.Duration { // 1, 2, …, n ms
		s := make([]time.Duration, n)
		for i := range s {
			s[i] = time.Duration(i+1) * time.Millisecond
		}
		return s
	}
	for _, c := range []struct {
		n, p int
		want time.Duration
	}{
		{100, 99, 99 * time.Millisecond},
		{100, 50, 50 * time.Millisecond},
		{100, 100, 100 * time.Millisecond},
		{100, 7, 7 * time.Millisecond}, // 0.07·100 is 7.000000000000001 in floats
		{200, 99, 198 * time.Millisecond},
		{101, 99, 100 * time.Millisecond},
		{4, 50, 2 * time.Millisecond},
		{1, 99, time.Millisecond},
		{3, 0, time.Millisecond},
	} {
		require.Equal(t, c.want, percentile(upTo(c.n), c.p), "p%d of %d", c.p, c.n)
	}
	p := latencyOf(upTo(100))
	require.Equal(t, percentiles{p50: 50 * time.Millisecond, p99: 99 * time.Millisecond, max: 100 * time.Millisecond}, p)
}

// TestTurnsAlternateEveryPair: each repetition runs every configuration
// once, and of any two, the one that ran first in a repetition runs second
// in the next.
func TestTurnsAlternateEveryPair(t *testing.T) {
	const reps, n = 4, 5
	var places [reps][n]int // places[rep][i]: when configuration i ran in rep
	var ran []int
	require.NoError(t, takeTurns(reps, n, func(i int) error { ran = append(ran, i); return nil }))
	require.Len(t, ran, reps*n)
	for rep := range reps {
		turn := ran[rep*n : (rep+1)*n]
		require.ElementsMatch(t, []int{0, 1, 2, 3, 4}, turn, "repetition %d runs each once", rep)
		for place, i := range turn {
			places[rep][i] = place
		}
	}
	for rep := range reps - 1 {
		for i := range n {
			for j := i + 1; j < n; j++ {
				before := places[rep][i] < places[rep][j]
				after := places[rep+1][i] < places[rep+1][j]
				require.NotEqual(t, before, after, "configurations %d and %d in repetitions %d and %d", i, j, rep, rep+1)
			}
		}
	}
}

// TestDuplicatesShowInTheComparedColumn: at-least-once delivery allows
// duplicates, and the table shows those of all repetitions, only when
// there are some.
func TestDuplicatesShowInTheComparedColumn(t *testing.T) {
	s := &series{windows: []window{{events: 10, elapsed: time.Second, duplicates: 2}, {events: 10, elapsed: time.Second, duplicates: 1}}}
	rep := &report{}
	rep.add(s, "1.00× raw insert")
	rep.add(&series{windows: []window{{events: 10, elapsed: time.Second}}}, "1.00× raw insert")
	require.Equal(t, "1.00× raw insert; 3 duplicate deliveries (all repetitions)", rep.rows[0].compared)
	require.Equal(t, "1.00× raw insert", rep.rows[1].compared)
	require.Equal(t, "4 duplicate deliveries (all repetitions)", withDuplicates("", 4))
}

// TestSummaryLineHasTheLogRelayWhenItRan: the quick run's last line is
// key=value pairs; it carries the log relay's figures when the server
// could run it, and leaves them out, rather than print zeros, when not.
func TestSummaryLineHasTheLogRelayWhenItRan(t *testing.T) {
	res := results{writeRatio: 0.97, drain1: 41_234, drain1Ratio: 3.9, hot: percentiles{p50: 30 * time.Microsecond, p99: 190 * time.Microsecond},
		cold: percentiles{p99: 6300 * time.Microsecond}, kafka: 50_000, orderedHot: 30_000, orderedHotRatio: 0.6}
	pairs := func(line string) map[string]string {
		rest, ok := strings.CutPrefix(line, "summary: ")
		require.True(t, ok, line)
		kv := map[string]string{}
		for field := range strings.FieldsSeq(rest) {
			k, v, ok := strings.Cut(field, "=")
			require.True(t, ok, field)
			require.NotContains(t, kv, k, "one %s", k)
			_, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, field)
			kv[k] = v
		}
		return kv
	}
	without := pairs(res.summaryLine())
	require.Equal(t, "0.97", without["write_ratio"])
	require.Equal(t, "41234", without["drain_per_s"])
	for k := range without {
		require.False(t, strings.HasPrefix(k, "wal_"), "%s without a log relay", k)
	}

	res.log = true
	res.walDrain, res.walVsPoll, res.walVsLocking, res.walWriteRatio = 95_000.4, 2.314, 1.6, 0.96
	res.walLatency = percentiles{p50: 800 * time.Microsecond, p99: 2500 * time.Microsecond}
	res.walOrderedHotRatio, res.walOrderedMany = 1.2, 2.5
	logOnly := map[string]string{}
	for k, v := range pairs(res.summaryLine()) {
		if before, ok := without[k]; ok {
			require.Equal(t, before, v, k)
		} else {
			logOnly[k] = v
		}
	}
	require.Equal(t, map[string]string{"wal_drain_per_s": "95000", "wal_ratio_vs_poll": "2.31", "wal_ratio_vs_locking": "1.60",
		"wal_write_ratio": "0.96", "wal_p50_ms": "0.80", "wal_p99_ms": "2.50", "wal_ordered_hot_ratio": "1.20",
		"wal_ordered_many_ratio": "2.50"}, logOnly)
}
