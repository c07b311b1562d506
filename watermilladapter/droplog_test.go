package watermilladapter

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/logtest"
)

// Drops are logged at warn level, counted: the first of a topic and cause
// at once, the next ones with the first line a minute later, each topic
// and cause on its own.
func TestDropLogCountsAndLogsOneLinePerTopicAMinute(t *testing.T) {
	t.Parallel()
	logger, captured := logtest.New()
	clock := clocktest.New(testStart)
	d := newDropLog(logger, clock)
	for range 3 {
		d.add("orders", dropHotFull)
	}
	d.add("invoices", dropHotFull)
	d.add("orders", dropQueued)
	clock.Advance(time.Minute - time.Nanosecond)
	d.add("orders", dropHotFull)
	clock.Advance(time.Nanosecond)
	d.add("orders", dropHotFull)

	type line struct {
		msg, topic string
		events     int64
	}
	var got []line
	for _, r := range captured.Records() {
		require.Equal(t, slog.LevelWarn, r.Level)
		require.Equal(t, time.Minute, r.Attrs["per"])
		got = append(got, line{r.Msg, r.Attrs["topic"].(string), r.Attrs["events"].(int64)})
	}
	require.Equal(t, []line{
		{dropHotFull, "orders", 1},
		{dropHotFull, "invoices", 1},
		{dropQueued, "orders", 1},
		{dropHotFull, "orders", 4}, // the two after the first line, the one before the minute, this one
	}, got)
	require.Equal(t, 6, d.total(dropHotFull))
}
