package watermilladapter_test

import (
	"context"
	"errors"
	"fmt"
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

// An ordered relay delivers an order's events one at a time, in the order
// they were written: the payment waits while the placement is retried.
func ExampleSubscriberConfig_ordered() {
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
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		Ordered:     true,
		RetryPolicy: outbox.Backoff{Base: 10 * time.Millisecond}, // a quick retry, for the example
	})
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
	shipped := make(chan struct{})
	router.AddConsumerHandler("notify-customer", "orders", sub, func(msg *message.Message) error {
		event, attempt := string(msg.Payload), msg.Metadata.Get(watermilladapter.MetadataAttempt)
		if event == "OrderPlaced" && attempt == "1" {
			fmt.Printf("%s, attempt %s: mail server down\n", event, attempt)
			return errors.New("mail server down")
		}
		fmt.Printf("%s, attempt %s\n", event, attempt)
		if event == "OrderShipped" {
			close(shipped)
		}
		return nil
	})
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	defer router.Close()

	// Three business transactions on order o-7, one after the other.
	for _, event := range []string{"OrderPlaced", "OrderPaid", "OrderShipped"} {
		err = store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			msg := message.NewMessage(watermill.NewUUID(), []byte(event))
			msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
			msg.Metadata.Set(watermilladapter.MetadataAggregateID, "o-7")
			msg.SetContext(ctx)
			return pub.Publish("orders", msg)
		})
		if err != nil {
			panic(err)
		}
	}
	select {
	case <-shipped:
	case <-time.After(10 * time.Second):
		fmt.Println("not delivered")
	}
	// Output:
	// OrderPlaced, attempt 1: mail server down
	// OrderPlaced, attempt 2
	// OrderPaid, attempt 1
	// OrderShipped, attempt 1
}
