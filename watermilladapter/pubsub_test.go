package watermilladapter_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// TestPubSub runs Watermill's universal Pub/Sub suite. Each suite test gets
// its own database; every constructor call inside one test shares it, as
// separate relay instances on one table would.
func TestPubSub(t *testing.T) {
	if testing.Short() {
		t.Skip("the universal suite takes a while; skipped with -short")
	}
	features := tests.Features{
		ConsumerGroups:                      false,
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     false,
		GuaranteedOrderWithSingleSubscriber: false,
		Persistent:                          true,
		NewSubscriberReceivesOldMessages:    false,
	}
	var (
		mu    sync.Mutex // the suite's tests run in parallel
		pools = map[*testing.T]*pgxpool.Pool{}
	)
	poolFor := func(t *testing.T) *pgxpool.Pool {
		mu.Lock()
		defer mu.Unlock()
		if p, ok := pools[t]; ok {
			return p
		}
		p := testdb.New(t)
		pools[t] = p
		return p
	}
	tests.TestPubSub(t, features, func(t *testing.T) (message.Publisher, message.Subscriber) {
		return newPubSub(t, poolFor(t))
	}, nil)
}

func newPubSub(t *testing.T, pool *pgxpool.Pool) (message.Publisher, message.Subscriber) {
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		// The suite nacks some messages many times and wants them back
		// quickly; and it hands messages between instances with no
		// cross-process wake-up, so the cold path polls often.
		RetryPolicy:  outbox.Backoff{Base: 5 * time.Millisecond, Max: 50 * time.Millisecond, MaxAttempts: 1000},
		PollInterval: 100 * time.Millisecond,
		DrainTimeout: time.Second,
	})
	require.NoError(t, err)
	pub, err := watermilladapter.NewPublisher[pgx.Tx](store, watermilladapter.PublisherConfig{HotPath: sub, OwnTransaction: true})
	require.NoError(t, err)
	return pub, sub
}
