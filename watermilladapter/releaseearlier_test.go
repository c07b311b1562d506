package watermilladapter_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// SubscriberConfig.ReleaseEarlierClaims: a relay started again under its
// owner hands back what its earlier run held, and nothing of this run.

// A relay started again under its owner, with ReleaseEarlierClaims, hands
// back the claims its earlier run died holding: their events, and the
// ordered aggregates behind them, go on at once rather than after the
// lease, here an hour.
func TestRestartedRelayReleasesItsEarlierRunsClaims(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	for _, payload := range []string{"a1", "a2", "b1"} {
		e := orderEvent(payload)
		e.AggregateType, e.AggregateID = "Order", payload[:1]
		writeCold(t, store, e)
	}
	now := time.Now()
	claimed, err := store.Driver().Claim(t.Context(), &outboxdriver.ClaimParams{Owner: "relay-a", Topic: "orders",
		Now: now, CreatedBefore: now, LockedUntil: now.Add(time.Hour), Limit: 50, Ordered: true})
	require.NoError(t, err)
	require.Len(t, claimed, 2, "the heads of both aggregates, held by the run that died")

	got := newReceived()
	relaytest.Start(t, pool, watermilladapter.SubscriberConfig{Owner: "relay-a", Ordered: true, ReleaseEarlierClaims: true},
		relaytest.Handlers{"orders": got.handler})
	var payloads []string
	for range 3 {
		payloads = append(payloads, string(got.next(t).Payload))
	}
	require.ElementsMatch(t, []string{"a1", "a2", "b1"}, payloads)
	require.Less(t, slices.Index(payloads, "a1"), slices.Index(payloads, "a2"), "in order: %v", payloads)
}

// ReleaseEarlierClaims releases once per topic, before the topic's first
// claim: a second subscription of the topic must not release the first's
// live claims, even when the clock stepped back since the Subscriber was
// made, so that its claims look older than the Subscriber. Here another
// relay polls right after any release that released something, and would
// deliver the event still in the first subscription's handler.
func TestSecondSubscribeKeepsTheLiveClaimsOfThisRun(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	store, err := postgres.NewStore(pool, postgres.Config{Clock: clock})
	require.NoError(t, err)
	other := &otherRelayPolls{Driver: store.Driver(), clock: clock}
	sub, err := watermilladapter.NewSubscriber(storeOn(t, other, clock), watermilladapter.SubscriberConfig{
		Owner: "relay-0", ReleaseEarlierClaims: true, Clock: clock, PollInterval: 20 * time.Millisecond, AllowSharedTopic: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	clock.Advance(-time.Second) // the wall clock steps back
	writeCold(t, store, orderEvent("x"))

	first, err := sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	held := nextMessage(t, first, "not delivered") // in its handler: not acked
	_, err = sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	// The clock stands still: each subscription claims once.
	relaytest.Eventually(t, "the second subscription's claim", func() bool { return other.claims.Load() == 2 })
	other.mu.Lock()
	require.Zero(t, other.released, "claims of this run released")
	require.NotContains(t, other.claimed, held.Metadata.Get(watermilladapter.MetadataEventID),
		"the event in the first subscription's handler, claimed by another relay")
	other.mu.Unlock()
	held.Ack()
}

// otherRelayPolls is the relay's driver; right after a ReleaseOwned that
// released something, another relay polls the topic. It counts this
// relay's claims, once ended.
type otherRelayPolls struct {
	outboxdriver.Driver[pgx.Tx]
	clock    *clocktest.Clock
	claims   atomic.Int64
	mu       sync.Mutex
	released int64
	claimed  []string
}

func (d *otherRelayPolls) Claim(ctx context.Context, p *outboxdriver.ClaimParams) ([]outboxdriver.Row, error) {
	defer d.claims.Add(1)
	return d.Driver.Claim(ctx, p)
}

func (d *otherRelayPolls) ReleaseOwned(ctx context.Context, p outboxdriver.ReleaseOwnedParams) (int64, error) {
	n, err := d.Driver.ReleaseOwned(ctx, p)
	if n > 0 {
		now := d.clock.Now()
		rows, _ := d.Driver.Claim(ctx, &outboxdriver.ClaimParams{Owner: "relay-1", Topic: p.Topic, Now: now,
			CreatedBefore: now, LockedUntil: now.Add(time.Minute), Limit: 50})
		d.mu.Lock()
		d.released += n
		for _, r := range rows {
			d.claimed = append(d.claimed, r.ID)
		}
		d.mu.Unlock()
	}
	return n, err
}
