package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

const OrderCreated outbox.EventType = "OrderCreated"

// An order and its event commit together; the rolled-back one leaves
// nothing behind. A relay then delivers the event and records it DONE.
// No server: the database is in memory (a file path works the same).
func Example() {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, sqlite.Memory)
	if err != nil {
		panic(err)
	}
	defer db.Close()

	// Start-up: migrate (safe from every instance at once), then build the
	// store and the writer.
	if err := sqlite.Migrate(ctx, db, sqlite.Config{}); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		panic(err)
	}
	store, err := sqlite.NewStore(db, sqlite.Config{})
	if err != nil {
		panic(err)
	}
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		panic(err)
	}

	placeOrder := func(id string, fail bool) error {
		return store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, id); err != nil {
				return err
			}
			event := outbox.NewJSON(OrderCreated, fmt.Appendf(nil, `{"orderId": %q}`, id))
			event.AggregateType, event.AggregateID = "Order", id
			if _, err := writer.Write(ctx, tx, event); err != nil {
				return err
			}
			if fail {
				return errors.New("payment declined")
			}
			return nil
		})
	}
	fmt.Println(placeOrder("order-1", false))
	fmt.Println(placeOrder("order-2", true))

	// A relay delivers the event: here a Subscriber read directly; in a
	// service, the Watermill router's handler, which forwards it.
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{})
	if err != nil {
		panic(err)
	}
	messages, err := sub.Subscribe(ctx, string(OrderCreated))
	if err != nil {
		panic(err)
	}
	msg := <-messages
	md := msg.Metadata
	fmt.Printf("deliver %s %s/%s %s\n", md.Get(watermilladapter.MetadataEventType),
		md.Get(watermilladapter.MetadataAggregateType), md.Get(watermilladapter.MetadataAggregateID), msg.Payload)
	msg.Ack()
	if err := sub.Close(); err != nil { // records the outcomes of what it delivered
		panic(err)
	}
	done, err := store.Get(ctx, md.Get(watermilladapter.MetadataEventID))
	if err != nil {
		panic(err)
	}
	fmt.Println(done.Status)
	// Output:
	// <nil>
	// payment declined
	// deliver OrderCreated Order/order-1 {"orderId": "order-1"}
	// DONE
}
