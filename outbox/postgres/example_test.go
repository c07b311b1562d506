package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

const OrderCreated outbox.EventType = "OrderCreated"

// An order and its event commit together; the rolled-back one leaves
// nothing behind. A relay then delivers the event and records its Ack.
func Example() {
	url, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	// Start-up: migrate (safe from every instance at once), then build the
	// store and the writer.
	if err := postgres.Migrate(ctx, pool, postgres.Config{}); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY)`); err != nil {
		panic(err)
	}
	store, err := postgres.NewStore(pool, postgres.Config{})
	if err != nil {
		panic(err)
	}
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		panic(err)
	}

	placeOrder := func(id string, fail bool) error {
		return store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, id); err != nil {
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

	// A relay, in this process or another, delivers the event to its
	// handler (usually a Watermill router's), and records the Ack.
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{})
	if err != nil {
		panic(err)
	}
	messages, err := sub.Subscribe(ctx, string(OrderCreated))
	if err != nil {
		panic(err)
	}
	msg := <-messages
	fmt.Printf("deliver %s %s/%s %s\n", msg.Metadata.Get(watermilladapter.MetadataEventType),
		msg.Metadata.Get(watermilladapter.MetadataAggregateType), msg.Metadata.Get(watermilladapter.MetadataAggregateID), msg.Payload)
	msg.Ack()
	if err := sub.Close(); err != nil { // records the outcomes still pending
		panic(err)
	}

	done, err := store.Get(ctx, msg.Metadata.Get(watermilladapter.MetadataEventID))
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

// Dead events: count them, page through them, and replay them once the
// cause is fixed.
func ExampleStore_ReplayDead() {
	ctx := context.Background()
	store, id, closeAll := storeWithOneEvent(ctx)
	defer closeAll()
	// A handler fails the event for good: it is DEAD at once.
	deliverOnce(ctx, store, func(msg *message.Message) {
		watermilladapter.RecordError(msg, outbox.Permanent(errors.New("schema registry unreachable")))
		msg.Nack()
	})

	n, _ := store.CountDead(ctx, outbox.DeadFilter{EventType: OrderCreated})
	page, _ := store.QueryDead(ctx, outbox.DeadQuery{Limit: 10})
	fmt.Println(n, page[0].Attempts, page[0].LastError)

	// Replay what the query found. A non-nil empty slice replays nothing
	// when it found nothing; nil IDs would not restrict by id.
	found := make([]string, 0, len(page))
	for _, e := range page {
		found = append(found, e.ID)
	}
	replayed, _ := store.ReplayDead(ctx, outbox.DeadFilter{IDs: found})
	e, _ := store.Get(ctx, id)
	fmt.Println(replayed, e.Status, e.Attempts, e.LastError)
	// Output:
	// 1 1 permanent: schema registry unreachable
	// 1 NEW 0 permanent: schema registry unreachable
}

// A retention job: delivered and dead events are kept, as the record of
// what was delivered and when, until they are older than the retention;
// then Purge deletes them in batches, each its own transaction, so that
// no purge holds many rows locked for long. Run it from one instance on a
// schedule (every instance may run it: purges pass over each other's
// rows).
func ExampleStore_Purge() {
	ctx := context.Background()
	store, _, closeAll := storeWithOneEvent(ctx)
	defer closeAll()
	deliverOnce(ctx, store, func(msg *message.Message) { msg.Ack() })

	retention := outbox.PurgeRequest{OlderThan: 30 * 24 * time.Hour} // DONE and DEAD, 1000 rows a batch
	n, err := store.Purge(ctx, retention)
	if err != nil {
		panic(err)
	}
	fmt.Println("purged", n, "of the events delivered today")

	time.Sleep(time.Millisecond)
	n, err = store.Purge(ctx, outbox.PurgeRequest{OlderThan: time.Millisecond, Statuses: []outbox.Status{outbox.StatusDone}})
	if err != nil {
		panic(err)
	}
	fmt.Println("purged", n, "with a retention of a millisecond")
	// Output:
	// purged 0 of the events delivered today
	// purged 1 with a retention of a millisecond
}

// A writing service announces its commits; a relay in another process
// hears of them at once instead of at its next poll. In a real relay the
// wake function is the subscriber's Wake.
func ExampleNotifier() {
	url, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	// In the relay: a listener on a connection of its own. It wakes every
	// topic once connected, since what was announced before is lost.
	woken := make(chan []string, 2)
	listener, err := postgres.Listen(pool, postgres.Config{}, func(topics ...string) { woken <- topics })
	if err != nil {
		panic(err)
	}
	defer listener.Close()
	fmt.Println("listening, woken for:", <-woken)

	// In the writer: a notifier, usually handed to the publisher as
	// PublisherConfig.Notify or to a writer as WriterConfig.Notify, which
	// call it after each commit.
	notifier, err := postgres.NewNotifier(pool, postgres.Config{})
	if err != nil {
		panic(err)
	}
	defer notifier.Close()
	notifier.Notify([]string{"orders"})
	fmt.Println("woken for:", <-woken)
	// Output:
	// listening, woken for: []
	// woken for: [orders]
}

// storeWithOneEvent opens a store on a database of its own, as Example
// does, commits one OrderCreated event to it, and returns the store, the
// event's id, and what closes them.
func storeWithOneEvent(ctx context.Context) (*postgres.Store, string, func()) {
	url, drop := testdb.ForExample()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	store, err := postgres.NewStore(pool, postgres.Config{})
	if err != nil {
		panic(err)
	}
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		panic(err)
	}
	var ids []string
	err = store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		ids, err = writer.Write(ctx, tx, outbox.NewJSON(OrderCreated, []byte(`{}`)))
		return err
	})
	if err != nil {
		panic(err)
	}
	return store, ids[0], func() {
		pool.Close()
		drop()
	}
}

// deliverOnce hands the first OrderCreated event of store to handle, as
// a relay delivers it, and returns once its outcome is recorded.
func deliverOnce(ctx context.Context, store *postgres.Store, handle func(msg *message.Message)) {
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{})
	if err != nil {
		panic(err)
	}
	messages, err := sub.Subscribe(ctx, string(OrderCreated))
	if err != nil {
		panic(err)
	}
	handle(<-messages)
	if err := sub.Close(); err != nil {
		panic(err)
	}
}
