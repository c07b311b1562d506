//go:build faults

package faults

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

const (
	relaysCount = 4
	relaysTopic = "relays"
)

// TestFourRelaysNoDuplicates runs four relays on one table, each with its
// own pool, hot path and poller, while each relay's process writes through
// its hot path and one more writer leaves its events to the pollers alone.
// Nothing fails, so nothing may be delivered twice. It runs with the
// relays keeping DONE rows, and deleting delivered events.
func TestFourRelaysNoDuplicates(t *testing.T) {
	t.Parallel()
	for _, deleteDone := range []bool{false, true} {
		t.Run(fmt.Sprint("DeleteDone=", deleteDone), func(t *testing.T) {
			t.Parallel()
			fourRelays(t, deleteDone)
		})
	}
}

func fourRelays(t *testing.T, deleteDone bool) {
	url := testdb.URL(t)
	scenario := "relays"
	if deleteDone {
		scenario = "relays-delete-done"
	}
	l := newLedger(t, openPool(t, url, 3), scenario)
	storeCfg := postgres.Config{DeleteDone: deleteDone}
	var relays []*relaytest.Relay
	for i := range relaysCount {
		relays = append(relays, relaytest.StartStore(t, openPool(t, url, 4), storeCfg, watermilladapter.SubscriberConfig{
			Owner:        fmt.Sprintf("relay-%d", i),
			PollInterval: 50 * time.Millisecond,
			BatchSize:    20,
		}, relaytest.Handlers{relaysTopic: l.handlerFor(fmt.Sprintf("relay-%d", i))}))
	}

	var all []*writers
	for _, r := range relays {
		all = append(all, startWriters(t, l, writerConfig{
			writers: 1, batch: 5, randomBatch: true, pause: 5 * time.Millisecond, rollbackEvery: 10,
			write: writeWithPublisher(r.Store, r.Pub, relaysTopic, nil),
		}))
	}
	// No hot path: only the four pollers compete for these.
	coldPool := openPool(t, url, 2)
	coldStore, err := postgres.NewStore(coldPool, storeCfg)
	require.NoError(t, err)
	coldWriter, err := outbox.NewWriter(coldStore, outbox.WriterConfig{})
	require.NoError(t, err)
	all = append(all, startWriters(t, l, writerConfig{
		writers: 1, batch: 10, randomBatch: true, pause: 5 * time.Millisecond, rollbackEvery: 10,
		write: writeWithWriter(coldStore, coldWriter, relaysTopic),
	}))

	const target = 8000
	waitFor(t, fmt.Sprintf("%d events written", target), 90*time.Second, func() (bool, string) {
		var n int64
		for _, w := range all {
			n += w.events.Load()
		}
		return n >= target, fmt.Sprintf("%d written", n)
	})
	for _, w := range all {
		w.stop()
	}
	f := l.waitDelivered(t, 60*time.Second)

	st, err := outboxState(t.Context(), l.pool)
	require.NoError(t, err)
	byRelay := map[string]int64{}
	rows, err := l.pool.Query(t.Context(), `SELECT by_relay, count(*) FROM fault_delivered GROUP BY 1`)
	require.NoError(t, err)
	for rows.Next() {
		var by string
		var n int64
		require.NoError(t, rows.Scan(&by, &n))
		byRelay[by] = n
	}
	require.NoError(t, rows.Err())
	l.report(t, f, 1, 0, fmt.Sprintf("relays=%d deliveries_by_relay=%v", relaysCount, byRelay))

	require.Zero(t, f.lost, "lost")
	require.Zero(t, f.duplicates, "no duplicates when nothing fails")
	require.Zero(t, f.phantom, "phantom")
	if deleteDone {
		require.Zero(t, st.total, "every delivered event deleted, no row from a rolled-back transaction: %s", st)
	} else {
		require.Equal(t, f.events, st.done, "%s", st)
		require.Equal(t, f.events, st.total, "no row from a rolled-back transaction: %s", st)
	}
	require.Len(t, byRelay, relaysCount, "every relay delivered: %v", byRelay)
}
