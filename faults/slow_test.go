//go:build faults

package faults

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

const (
	slowTopic = "slow"
	// slowDelay makes the handler's 4 workers deliver at most 200 events/s;
	// the writers write ten to twenty times that (both rates are logged).
	slowDelay = 20 * time.Millisecond
	// slowPayload is the size of each event's payload: big enough that a
	// relay holding the backlog in memory would show it (20,000 events are
	// 20 MiB of payload alone).
	slowPayload = 1024
	// heapGrowthLimit is how much the relay's heap may grow between a
	// backlog of 2,000 events and one of 20,000: the queues are bounded and
	// full at both points, so the heap should not grow at all; the limit
	// leaves room for the noise of the runtime, pgx and the race detector.
	heapGrowthLimit = 8 << 20
)

// backlogMarks are the backlogs at which the heap is sampled.
var backlogMarks = []int64{2_000, 5_000, 10_000, 15_000, 20_000}

// TestSlowHandler has writers write at least ten times faster than the
// handler delivers, until the backlog passes 20,000 events. The heap in
// use, sampled after a GC at backlogs of 2,000 to 20,000, does not grow
// with the backlog: the relay holds at most its bounded queues. Then the
// handler recovers its speed and the backlog drains.
//
// Not parallel: the heap is the whole process's, so this test runs alone.
func TestSlowHandler(t *testing.T) {
	url := testdb.URL(t)
	pool := openPool(t, url, 8)
	l := newLedger(t, pool, "slow")
	var (
		slow      atomic.Bool
		delivered atomic.Int64
	)
	slow.Store(true)
	record := l.handler
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, relaytest.Handlers{slowTopic: func(msg *message.Message) error {
		if slow.Load() {
			time.Sleep(slowDelay) // the slow downstream
		}
		delivered.Add(1)
		return record(msg)
	}})

	filler := strings.Repeat("x", slowPayload-64)
	start := time.Now()
	ws := startWriters(t, l, writerConfig{
		writers: 2, batch: 20, pause: 5 * time.Millisecond,
		write: writeWithPublisher(r.Store, r.Pub, slowTopic, func(id string) []byte {
			return fmt.Appendf(nil, `{"event":%q,"filler":%q}`, id, filler)
		}),
	})
	backlog := func() int64 { return ws.events.Load() - delivered.Load() }

	type sample struct {
		backlog, heapInuse, heapAlloc uint64
	}
	var samples []sample
	for _, mark := range backlogMarks {
		waitFor(t, fmt.Sprintf("a backlog of %d", mark), 60*time.Second, func() (bool, string) {
			return backlog() >= mark, fmt.Sprintf("backlog %d; writers %s", backlog(), ws)
		})
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		samples = append(samples, sample{uint64(backlog()), ms.HeapInuse, ms.HeapAlloc})
	}
	elapsed := time.Since(start)
	writeRate := float64(ws.events.Load()) / elapsed.Seconds()
	deliverRate := float64(delivered.Load()) / elapsed.Seconds()
	ws.stop()
	slow.Store(false)
	drainStart := time.Now()
	f := l.waitDelivered(t, 90*time.Second)
	drained := time.Since(drainStart)

	var heaps []string
	first, peak := samples[0].heapInuse, samples[0].heapInuse
	for _, s := range samples {
		heaps = append(heaps, fmt.Sprintf("%d:%.1fMiB", s.backlog, float64(s.heapInuse)/(1<<20)))
		peak = max(peak, s.heapInuse)
	}
	l.report(t, f, 1, 0, fmt.Sprintf("write_rate=%.0f/s deliver_rate=%.0f/s heap_inuse_by_backlog=%s growth=%.1fMiB drained_in=%s",
		writeRate, deliverRate, strings.Join(heaps, ","), float64(peak-first)/(1<<20), drained.Round(time.Millisecond)))

	require.LessOrEqual(t, peak-first, uint64(heapGrowthLimit),
		"heap in use grew with the backlog: %s", strings.Join(heaps, ", "))
	require.Zero(t, f.lost, "lost")
	require.Zero(t, f.duplicates, "duplicates")
	require.Zero(t, f.phantom, "phantom")
	st, err := outboxState(t.Context(), pool)
	require.NoError(t, err)
	require.Equal(t, f.events, st.done, "%s", st)
}
