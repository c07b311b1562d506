package middleware_test

import (
	"context"
	"fmt"

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

// A billing service consumes OrderPlaced, charges the order and publishes
// PaymentTaken through its own outbox. Deduplicate runs the handler in one
// transaction with the record of the event, so however often OrderPlaced
// arrives (delivery is at least once), the order is charged once and one
// PaymentTaken is written. On a router, a Deduplicate with no Consumer
// set keeps a record per handler: router.AddMiddleware(
// outboxmw.RecordErrors, dedupe). Here the handler is called directly,
// with its consumer named.
func ExampleDeduplicate() {
	url, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	// Migrate creates the outbox table and, beside it, the inbox.
	if err := postgres.Migrate(ctx, pool, postgres.Config{}); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE payments (order_id text NOT NULL)`); err != nil {
		panic(err)
	}
	store, err := postgres.NewStore(pool, postgres.Config{})
	if err != nil {
		panic(err)
	}
	publisher, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{})
	if err != nil {
		panic(err)
	}
	dedupe, err := outboxmw.Deduplicate(store, outboxmw.DeduplicateConfig{Consumer: "billing"})
	if err != nil {
		panic(err)
	}

	charge := dedupe(func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context() // carries the transaction
		tx, _ := outbox.TxFromContext[pgx.Tx](ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO payments (order_id) VALUES ($1)`, string(msg.Payload)); err != nil {
			return nil, err
		}
		taken := message.NewMessage(watermill.NewUUID(), msg.Payload)
		taken.Metadata.Set(watermilladapter.MetadataEventType, "PaymentTaken")
		taken.SetContext(ctx) // written in the same transaction
		return nil, publisher.Publish("payments", taken)
	})

	placed := message.NewMessage(watermill.NewUUID(), []byte("order-1"))
	placed.Metadata.Set(watermilladapter.MetadataEventID, outbox.NewID())
	for range 3 { // delivered three times
		if _, err := charge(placed); err != nil {
			panic(err)
		}
	}

	var payments, events int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM payments`).Scan(&payments); err != nil {
		panic(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_event`).Scan(&events); err != nil {
		panic(err)
	}
	fmt.Printf("charged %d time(s), %d PaymentTaken event(s) written\n", payments, events)
	// Output: charged 1 time(s), 1 PaymentTaken event(s) written
}
