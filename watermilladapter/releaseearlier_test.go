package watermilladapter_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// ReleaseEarlierClaims releases once per topic, before the topic's first
// claim: a second subscription of the topic must not release the first's
// live claims, even when the clock stepped back since the Subscriber was
// made, so that its claims look older than the Subscriber. Here another
// relay polls right after any release that released something, and would
// deliver the event still in the first subscription's handler.
func TestSecondSubscribeKeepsTheLiveClaimsOfThisRun(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(time.Now())
	store, err := postgres.NewStore(pool, postgres.Config{Clock: clock})
	require.NoError(t, err)
	other := &otherRelayPolls{Store: store}
	sub, err := watermilladapter.NewSubscriber(other, watermilladapter.SubscriberConfig{
		Owner: "relay-0", ReleaseEarlierClaims: true, Clock: clock, PollInterval: 20 * time.Millisecond,
		DrainTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	clock.Advance(-time.Second) // the wall clock steps back

	writer, err := outbox.NewWriter(store, outbox.WriterConfig{Clock: clock})
	require.NoError(t, err)
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, storetest.JSONEvents(1, "orders")...)
		return err
	}))

	first, err := sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	var held string
	select {
	case msg := <-first: // in its handler: not acked
		held = msg.Metadata.Get(watermilladapter.MetadataEventID)
	case <-time.After(10 * time.Second):
		t.Fatal("not delivered")
	}
	_, err = sub.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	time.Sleep(500 * time.Millisecond) // the second subscription claims meanwhile
	other.mu.Lock()
	defer other.mu.Unlock()
	require.Zero(t, other.released, "claims of this run released")
	require.NotContains(t, other.claimed, held, "the event in the first subscription's handler, claimed by another relay")
}

// otherRelayPolls is the relay's store; right after a ReleaseOwned that
// released something, another relay polls the topic.
type otherRelayPolls struct {
	*postgres.Store
	mu       sync.Mutex
	released int64
	claimed  []string
}

func (s *otherRelayPolls) ReleaseOwned(ctx context.Context, owner, topic string, before time.Time) (int64, error) {
	n, err := s.Store.ReleaseOwned(ctx, owner, topic, before)
	if n > 0 {
		events, _ := s.Store.Claim(ctx, outbox.ClaimRequest{Owner: "relay-1", Topics: []string{topic}})
		s.mu.Lock()
		s.released += n
		s.claimed = append(s.claimed, storetest.IDs(events)...)
		s.mu.Unlock()
	}
	return n, err
}
