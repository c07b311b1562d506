package watermilladapter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wmoutbox/wmoutbox/internal/testdb"
	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// A service writes an order and its event in one transaction; the relay in
// the same process hands the event to a router handler right after commit.
func Example() {
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
	handled := make(chan struct{})
	router.AddConsumerHandler("ship", "orders", sub, func(msg *message.Message) error {
		fmt.Printf("%s %s attempt %s via %s path\n", msg.Payload,
			msg.Metadata.Get(watermilladapter.MetadataAggregateID),
			msg.Metadata.Get(watermilladapter.MetadataAttempt),
			msg.Metadata.Get(watermilladapter.MetadataSource))
		close(handled)
		return nil
	})
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	defer router.Close() // closes the subscriber too

	err = store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		// ... the business change on tx ...
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{"orderId":"o-42"}`))
		msg.Metadata.Set(watermilladapter.MetadataAggregateID, "o-42")
		msg.SetContext(ctx) // carries tx
		return pub.Publish("orders", msg)
	})
	if err != nil {
		panic(err)
	}
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		fmt.Println("not delivered")
	}
	// Output:
	// {"orderId":"o-42"} o-42 attempt 1 via hot path
}
