package watermilladapter

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// staleCopyDriver hands out two ordered events, x and e, in one claim;
// once their leases ran out (phase 2), it hands e out again, under a new
// claim of the same owner. It records releases.
type staleCopyDriver struct {
	instantDriver
	clock *clocktest.Clock
	lease time.Duration

	mu       sync.Mutex
	claims   int
	phase2   bool
	reissued bool
	ids      []string
}

func (d *staleCopyDriver) row(id, aggregate string, dueFor time.Duration) outboxdriver.Row {
	r := orderRow(id, d.clock.Now().Add(d.lease))
	r.AggregateType, r.AggregateID, r.AvailableAt = "order", aggregate, d.clock.Now().Add(-dueFor)
	return r
}

func (d *staleCopyDriver) Claim(context.Context, *outboxdriver.ClaimParams) ([]outboxdriver.Row, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.claims++
	switch {
	case d.claims == 1:
		return []outboxdriver.Row{d.row("x", "A", 2*time.Second), d.row("e", "B", time.Second)}, nil
	case d.phase2 && !d.reissued:
		d.reissued = true
		return []outboxdriver.Row{d.row("e", "B", time.Second)}, nil
	}
	return nil, nil
}

func (d *staleCopyDriver) Release(_ context.Context, p outboxdriver.ReleaseParams) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ids = append(d.ids, p.IDs...)
	return int64(len(p.IDs)), nil
}

func (d *staleCopyDriver) releasedIDs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.ids)
}

// Two ordered subscriptions of one topic in one Subscriber share its
// events and its owner. Subscription 1's handler of x hangs past the lease
// while e waits in its cold queue; subscription 2 claims e again once the
// lease ran out and hands it to its handler, which has not returned at
// Close. With Ordered, an event whose handler has not returned is left to
// its lease (SubscriberConfig.DrainTimeout): subscription 1's stale copy
// of e must not be released at Close, since the release, by owner, would
// end subscription 2's live claim, and another relay could deliver e
// again, and the next event of aggregate B overtake it, while e's handler
// still runs.
func TestCloseLeavesAStaleQueuedCopyToItsClaim(t *testing.T) {
	t.Parallel()
	const lease = time.Hour
	driver := &staleCopyDriver{clock: clocktest.New(testStart), lease: lease}
	sub, err := NewSubscriber(fakeStore(t, driver, driver.clock), SubscriberConfig{Ordered: true, WorkerCount: 1,
		BatchSize: 2, ColdQueueCapacity: 2, LockTimeout: lease, DrainTimeout: 100 * time.Millisecond,
		Clock: driver.clock, PollInterval: time.Hour, AllowSharedTopic: true})
	require.NoError(t, err)
	first, err := sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	require.Equal(t, "x", receive(t, first, "x").Metadata.Get(MetadataEventID))
	// x's handler hangs (never acks); e waits in subscription 1's queue.
	// The lease runs out; subscription 2 claims e again.
	driver.clock.Advance(lease + time.Minute)
	driver.mu.Lock()
	driver.phase2 = true
	driver.mu.Unlock()
	second, err := sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	require.Equal(t, "e", receive(t, second, "e").Metadata.Get(MetadataEventID))
	// Neither handler returns before Close, which gives up on them after
	// DrainTimeout.
	require.NoError(t, closeOnClock(t, sub, driver.clock))
	require.NotContains(t, driver.releasedIDs(), "e",
		"Close released ordered event e while the handler of its live claim has not returned: the stale queued copy's release ends the live claim")
}
