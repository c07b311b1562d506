package storetest

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// heartbeat renews owner's heartbeat until lease from the clock's time,
// and returns whether it existed.
func (f *fixture[Tx]) heartbeat(t *testing.T, owner string, lease time.Duration) bool {
	t.Helper()
	existed, err := f.driver.Heartbeat(t.Context(), outboxdriver.HeartbeatParams{Owner: owner, Until: f.Clock.Now().Add(lease)})
	require.NoError(t, err)
	return existed
}

// reap releases the relays dead at the clock's time, sorted by owner,
// their topics sorted.
func (f *fixture[Tx]) reap(t *testing.T) []outboxdriver.ReleasedRelay {
	t.Helper()
	released, err := f.driver.ReleaseDeadRelays(t.Context(), outboxdriver.ReleaseDeadRelaysParams{Now: f.Clock.Now(), Limit: 100})
	require.NoError(t, err)
	return sortReleased(released)
}

func sortReleased(released []outboxdriver.ReleasedRelay) []outboxdriver.ReleasedRelay {
	for i := range released {
		slices.Sort(released[i].Topics)
	}
	slices.SortFunc(released, func(a, b outboxdriver.ReleasedRelay) int { return strings.Compare(a.Owner, b.Owner) })
	return released
}

// A heartbeat is written, then renewed; it reports whether it was there.
// Owners of the longest length every dialect stores fit.
func testHeartbeatRenews[Tx any](t *testing.T, f *fixture[Tx]) {
	require.False(t, f.heartbeat(t, "a", 10*time.Second), "a new relay")
	require.True(t, f.heartbeat(t, "a", 10*time.Second), "a renewal to the same time")
	f.Clock.Advance(2 * time.Second)
	require.True(t, f.heartbeat(t, "a", 10*time.Second), "a renewal")

	longest := strings.Repeat("\U0001F600", 128)
	require.False(t, f.heartbeat(t, longest, 10*time.Second))
	require.True(t, f.heartbeat(t, longest, 10*time.Second))

	require.NoError(t, f.driver.EndHeartbeat(t.Context(), "a"))
	require.False(t, f.heartbeat(t, "a", 10*time.Second), "an ended heartbeat is gone")
}

// Stats lists the relays' heartbeats, live or expired, by owner, and no
// other lease; the relay's periodic read has none.
func testStatsRelays[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	f.heartbeat(t, "b", 10*time.Second)
	f.heartbeat(t, "a", 2*time.Second)
	held, err := f.driver.AcquireLease(ctx, outboxdriver.LeaseParams{Name: "retention", Owner: "a",
		Now: f.Clock.Now(), Until: f.Clock.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.True(t, held)
	f.Clock.Advance(5 * time.Second)

	stats, err := f.Store.Stats(ctx)
	require.NoError(t, err)
	require.Len(t, stats.Relays, 2, "heartbeats only: %+v", stats.Relays)
	a, b := stats.Relays[0], stats.Relays[1]
	require.Equal(t, "a", a.Owner)
	require.False(t, a.Alive, "a's heartbeat expired 3s ago")
	require.True(t, Start.Add(2*time.Second).Equal(a.Until), "%v", a.Until)
	require.Equal(t, "b", b.Owner)
	require.True(t, b.Alive)
	require.True(t, Start.Add(10*time.Second).Equal(b.Until), "%v", b.Until)

	pending, err := f.driver.Stats(ctx, outboxdriver.StatsParams{Now: f.Clock.Now(), PendingOnly: true})
	require.NoError(t, err)
	require.Empty(t, pending.Relays)
}

// The claims of a relay whose heartbeat expired are handed back, due at
// once in their place: its pending claims only, on every topic. Live
// relays, and the holders of named leases that are not heartbeats, keep
// theirs.
func testReleaseDeadRelays[Tx any](t *testing.T, f *fixture[Tx]) {
	orders := f.write(t, JSONEvents(3, "orders")...)
	billing := f.write(t, JSONEvents(1, "billing")...)
	require.False(t, f.heartbeat(t, "a", 10*time.Second))
	require.False(t, f.heartbeat(t, "b", 10*time.Second))
	require.False(t, f.heartbeat(t, "idle", 10*time.Second))
	require.Len(t, f.claim(t, request{Owner: "a", Topic: "orders", Limit: 2}), 2)
	require.Len(t, f.claim(t, request{Owner: "b", Topic: "orders"}), 1)
	require.Len(t, f.claim(t, request{Owner: "a", Topic: "billing"}), 1)
	require.EqualValues(t, 1, f.markDone(t, orders[0]))
	// Named leases of other kinds, expired, whose owners hold claims.
	for _, name := range []string{"retention", "relay_b", "relayb"} {
		held, err := f.driver.AcquireLease(t.Context(), outboxdriver.LeaseParams{Name: name, Owner: "b", Now: f.Clock.Now(), Until: f.Clock.Now().Add(time.Second)})
		require.NoError(t, err)
		require.True(t, held)
	}

	f.Clock.Advance(5 * time.Second)
	require.Empty(t, f.reap(t), "every heartbeat runs")
	require.True(t, f.heartbeat(t, "b", 10*time.Second))
	f.Clock.Advance(5 * time.Second)
	require.Empty(t, f.reap(t), "a heartbeat runs until its until")

	f.Clock.Advance(time.Millisecond)
	require.Equal(t, []outboxdriver.ReleasedRelay{
		{Owner: "a", Events: 2, Topics: []string{"billing", "orders"}},
		{Owner: "idle"},
	}, f.reap(t))
	for _, id := range []string{orders[1], billing[0]} {
		e := f.get(t, id)
		require.Empty(t, e.LockedBy)
		require.True(t, e.LockedAt.IsZero())
		require.True(t, e.LockedUntil.IsZero())
		require.Equal(t, Start, e.AvailableAt.UTC(), "due at once, at the time it was due before")
	}
	require.Equal(t, "b", f.get(t, orders[2]).LockedBy, "a live relay keeps its claims")
	require.Equal(t, orders[1:2], f.claim(t, request{Owner: "c", Topic: "orders"}))
	require.Equal(t, billing, f.claim(t, request{Owner: "c", Topic: "billing"}))

	require.Empty(t, f.reap(t), "a relay is released once")
	require.False(t, f.heartbeat(t, "a", 10*time.Second), "the relay learns that it was presumed dead")
	f.Clock.Advance(time.Minute)
	require.NoError(t, f.driver.EndHeartbeat(t.Context(), "a"))
	require.Equal(t, []outboxdriver.ReleasedRelay{{Owner: "b", Events: 1, Topics: []string{"orders"}}}, f.reap(t),
		"an ended heartbeat is not released again")
}

// Concurrent reapers release a dead relay once: one of them reports it.
func testReleaseDeadRelaysOnce[Tx any](t *testing.T, f *fixture[Tx]) {
	written := f.write(t, JSONEvents(5, "orders")...)
	require.False(t, f.heartbeat(t, "dead", time.Second))
	require.Len(t, f.claim(t, request{Owner: "dead", Topic: "orders"}), len(written))
	now := f.Clock.Advance(2 * time.Second)

	const reapers = 8
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		released []outboxdriver.ReleasedRelay
		errs     []error
	)
	for range reapers {
		wg.Go(func() {
			r, err := f.driver.ReleaseDeadRelays(context.Background(), outboxdriver.ReleaseDeadRelaysParams{Now: now, Limit: 10})
			mu.Lock()
			defer mu.Unlock()
			released = append(released, r...)
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Equal(t, []outboxdriver.ReleasedRelay{{Owner: "dead", Events: int64(len(written)), Topics: []string{"orders"}}}, released)
}
