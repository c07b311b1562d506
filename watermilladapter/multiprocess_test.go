package watermilladapter_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// Relays in several processes: wake-ups across them, claims handed back,
// and no event delivered twice.

// An event committed by a process with no relay for its topic reaches a
// relay of another process at once: the writer's Notifier wakes that
// relay's Listener, whose poll interval alone would take an hour.
func TestCommitInOneProcessWakesTheRelayOfAnother(t *testing.T) {
	t.Parallel()
	pools := twoProcesses(t)

	got := newReceived()
	relay := relaytest.Start(t, pools[0], watermilladapter.SubscriberConfig{PollInterval: time.Hour}, relaytest.Handlers{"orders": got.handler})
	listener, err := postgres.Listen(pools[0], postgres.Config{}, relay.Sub.Wake)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, listener.Close()) })

	writer := relaytest.Start(t, pools[1], watermilladapter.SubscriberConfig{}, nil)
	notifier, err := postgres.NewNotifier(pools[1], postgres.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, notifier.Close()) })
	writer.Pub, err = watermilladapter.NewPublisher(writer.Store, watermilladapter.PublisherConfig{Notify: notifier.Notify})
	require.NoError(t, err)

	// The first event may be found by the relay's first claim; the second
	// comes after it, when only a wake-up can bring it within the hour.
	for _, payload := range []string{"first", "second"} {
		writer.Publish(t, "orders", newMsg(payload))
		require.Equal(t, payload, string(got.next(t).Payload))
	}
}

// Claims a relay hands back at Close reach a relay of another process at
// once when the closing relay's Notify announces them: that relay's first
// claim found them all claimed, and its poll interval is an hour.
func TestReleaseAtCloseWakesTheRelayOfAnother(t *testing.T) {
	t.Parallel()
	pools := twoProcesses(t)
	const events = 20
	store := storeWithBacklog(t, pools[0], nil, events)

	notifier, err := postgres.NewNotifier(pools[0], postgres.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, notifier.Close()) })
	closing, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		Owner: "closing", PollInterval: time.Hour, DrainTimeout: time.Millisecond, Notify: notifier.Notify})
	require.NoError(t, err)
	if _, err := closing.Subscribe(t.Context(), "orders"); err != nil { // never read: the events wait claimed
		require.NoError(t, err)
	}
	claimedBy := func(owner string) int {
		var n int
		require.NoError(t, pools[0].QueryRow(t.Context(),
			`SELECT count(*) FROM outbox_event WHERE locked_by = $1`, owner).Scan(&n))
		return n
	}
	relaytest.Eventually(t, "every event claimed by the closing relay", func() bool { return claimedBy("closing") == events })

	otherStore, err := postgres.NewStore(pools[1], postgres.Config{})
	require.NoError(t, err)
	counted := &claimCounter{Driver: otherStore.Driver()}
	other, err := watermilladapter.NewSubscriber(storeOn(t, counted, nil), watermilladapter.SubscriberConfig{Owner: "other", PollInterval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, other.Close()) })
	msgs, err := other.Subscribe(t.Context(), "orders")
	require.NoError(t, err)
	listening := make(chan struct{}, 1)
	listener, err := postgres.Listen(pools[1], postgres.Config{}, func(topics ...string) {
		other.Wake(topics...)
		select {
		case listening <- struct{}{}:
		default:
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, listener.Close()) })
	select {
	case <-listening:
	case <-time.After(relaytest.WaitLimit):
		t.Fatal("the listener did not listen")
	}
	// Every wake-up so far (the first claim, the listener's at its start,
	// which would find the released events with no notification) is over
	// once a claim that starts after this one has ended: claims of a
	// subscription run one after another.
	started := counted.claims.Load()
	other.Wake("orders")
	relaytest.Eventually(t, "a claim after the listener's first wake-up", func() bool { return counted.ended.Load() > started })
	require.Equal(t, events, claimedBy("closing"))

	require.NoError(t, closing.Close())
	for range events {
		select {
		case msg := <-msgs:
			msg.Ack()
		case <-time.After(relaytest.WaitLimit):
			t.Fatal("the released events did not reach the other relay")
		}
	}
}

func TestThreeRelaysDeliverEveryEventOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("10,000 events; skipped with -short")
	}
	const events, writers, perTx = 10000, 4, 10
	url := testdb.URL(t)
	var (
		mu     sync.Mutex
		counts = make(map[string]int, events)
	)
	count := func(msg *message.Message) error {
		mu.Lock()
		counts[msg.Metadata.Get(watermilladapter.MetadataEventID)]++
		mu.Unlock()
		return nil
	}
	relays := make([]*relaytest.Relay, 3)
	var pools []*pgxpool.Pool
	for i := range relays {
		pool, err := pgxpool.New(t.Context(), url)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		pools = append(pools, pool)
		relays[i] = relaytest.Start(t, pool, watermilladapter.SubscriberConfig{Owner: fmt.Sprint("relay-", i), PollInterval: 50 * time.Millisecond},
			relaytest.Handlers{"orders": count})
	}
	var wg sync.WaitGroup
	for w := range writers {
		r := relays[w%len(relays)]
		wg.Go(func() {
			for range events / writers / perTx {
				msgs := make([]*message.Message, perTx)
				for i := range msgs {
					msgs[i] = newMsg(`{"n":1}`)
				}
				r.Publish(t, "orders", msgs...)
			}
		})
	}
	wg.Wait()
	advanceUntilDone(t, nil, pools[0], events)
	mu.Lock()
	defer mu.Unlock()
	dups, perSource := 0, len(counts)
	for _, n := range counts {
		dups += n - 1
	}
	require.Equal(t, events, perSource, "every event delivered")
	require.Zero(t, dups, "duplicate deliveries")
}
