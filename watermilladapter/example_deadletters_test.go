package watermilladapter_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wmoutbox/wmoutbox/internal/testdb"
	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// Events a handler rejects go DEAD with their error. An operator sees them
// grouped by failure reason, whatever order each was about, and replays a
// group once its cause is fixed: the relay delivers them again.
func Example_deadLetters() {
	url, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	store, err := postgres.NewStore(pool, postgres.Config{})
	if err != nil {
		panic(err)
	}
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{})
	if err != nil {
		panic(err)
	}
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: sub})
	if err != nil {
		panic(err)
	}

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	router.AddMiddleware(outboxmw.RecordErrors)
	var fixed atomic.Bool
	var delivered atomic.Int32
	router.AddConsumerHandler("charge", "payments", sub, func(msg *message.Message) error {
		order := msg.Metadata.Get(watermilladapter.MetadataAggregateID)
		switch {
		case fixed.Load():
			delivered.Add(1)
			return nil
		case string(msg.Payload) == "card":
			return outbox.Permanent(fmt.Errorf("charge order %s: card declined", order))
		default:
			return outbox.Permanent(fmt.Errorf("dial tcp 10.0.0.%s:443: connection refused", order))
		}
	})
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	defer router.Close()

	for i, kind := range []string{"card", "card", "card", "network", "network"} {
		err = store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			msg := message.NewMessage(watermill.NewUUID(), []byte(kind))
			msg.Metadata.Set(watermilladapter.MetadataAggregateID, fmt.Sprint(100+i))
			msg.SetContext(ctx)
			return pub.Publish("payments", msg)
		})
		if err != nil {
			panic(err)
		}
	}
	// Tests wait for the relay to record every outcome, not for a time.
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sub.WaitIdle(wait); err != nil { // all five rejected and recorded DEAD
		panic(err)
	}

	groups, err := store.DeadGroups(ctx, outbox.DeadGroupQuery{})
	if err != nil {
		panic(err)
	}
	for _, g := range groups {
		fmt.Printf("%d × %s\n", g.Count, g.Reason)
	}

	fixed.Store(true) // the card processor is back
	n, err := store.ReplayDead(ctx, outbox.DeadFilter{Group: groups[0].Group})
	if err != nil {
		panic(err)
	}
	sub.Wake("payments")
	if err := sub.WaitIdle(wait); err != nil {
		panic(err)
	}
	fmt.Println("replayed", n, "and delivered", delivered.Load())
	// Output:
	// 3 × permanent: charge order <n>: card declined
	// 2 × permanent: dial tcp <addr>: connection refused
	// replayed 3 and delivered 3
}
