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
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// An outbox.Writer, without a Publisher, gets the same hot path: given the
// Subscriber as its HotPath, the event it writes in store.InTx is handed
// to the handler right after the commit, without waiting for a poll (here
// an hour).
func Example_writer() {
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
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{PollInterval: time.Hour})
	if err != nil {
		panic(err)
	}
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{HotPath: sub})
	if err != nil {
		panic(err)
	}

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	router.AddMiddleware(outboxmw.RecordErrors)
	handled := make(chan struct{})
	router.AddConsumerHandler("ship", "OrderCreated", sub, func(msg *message.Message) error {
		fmt.Printf("%s via %s path\n", msg.Payload, msg.Metadata.Get(watermilladapter.MetadataSource))
		close(handled)
		return nil
	})
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	defer router.Close() // closes the subscriber too

	const OrderCreated outbox.EventType = "OrderCreated"
	err = store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		// ... the business change on tx ...
		_, err := writer.Write(ctx, tx, outbox.NewJSON(OrderCreated, []byte(`{"orderId":"o-7"}`)))
		return err
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
	// {"orderId":"o-7"} via hot path
}
