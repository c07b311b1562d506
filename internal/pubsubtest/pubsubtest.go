// Package pubsubtest runs Watermill's universal Pub/Sub suite
// (github.com/ThreeDotsLabs/watermill/pubsub/tests) on a watermilladapter
// Publisher and Subscriber over any store, for the tests of each dialect
// that runs it: watermilladapter's on PostgreSQL, outbox/mysql's on
// MySQL. The MySQL run is not in watermilladapter's tests because
// `go mod tidy` in a module that imports a package downloads what that
// package's tests import: a PostgreSQL relay would download the MySQL
// driver.
package pubsubtest

import (
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// Run runs Watermill's universal Pub/Sub suite. Each suite
// test gets its own database (from newStore); every constructor call inside
// one test shares it, as separate relay instances on one table would.
func Run[Tx any](t *testing.T, newStore func(t *testing.T) *outbox.Store[Tx]) {
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
		// The suite's short sizes (100 messages where it sends 5,000)
		// check every property it checks at full size; under -race the
		// full sizes keep two cores busy for the whole package's run.
		// Throughput is the bench's to measure.
		ForceShort: true,
	}
	var (
		mu     sync.Mutex // the suite's tests run in parallel
		stores = map[*testing.T]*outbox.Store[Tx]{}
	)
	storeFor := func(t *testing.T) *outbox.Store[Tx] {
		mu.Lock()
		defer mu.Unlock()
		if s, ok := stores[t]; ok {
			return s
		}
		s := newStore(t)
		stores[t] = s
		return s
	}
	tests.TestPubSub(t, features, func(t *testing.T) (message.Publisher, message.Subscriber) {
		return newPubSub(t, storeFor(t))
	}, nil)
}

func newPubSub[Tx any](t *testing.T, store *outbox.Store[Tx]) (message.Publisher, message.Subscriber) {
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		// The suite nacks some messages many times and wants them back
		// quickly; and it hands messages between instances with no
		// cross-process wake-up, so the cold path polls often.
		RetryPolicy:  outbox.Backoff{Base: 5 * time.Millisecond, Max: 50 * time.Millisecond, MaxAttempts: 1000},
		PollInterval: 100 * time.Millisecond,
		DrainTimeout: time.Second,
	})
	require.NoError(t, err)
	pub, err := watermilladapter.NewPublisher[Tx](store, watermilladapter.PublisherConfig{HotPath: sub, OwnTransaction: true})
	require.NoError(t, err)
	return pub, sub
}
