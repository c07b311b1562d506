package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

const OrderCreated outbox.EventType = "OrderCreated"

// An order and its event commit together; the rolled-back order leaves no
// event behind. MySQL and SQLite stores are used the same way, with
// *sql.Tx for pgx.Tx.
func Example() {
	ctx := context.Background()
	store, pool, closeDB := exampleStore(ctx)
	defer closeDB()
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY)`); err != nil {
		panic(err)
	}
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		panic(err)
	}

	placeOrder := func(id string, declined bool) (eventID string, err error) {
		err = store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, id); err != nil {
				return err
			}
			event := outbox.NewJSON(OrderCreated, fmt.Appendf(nil, `{"orderId":%q}`, id))
			event.AggregateType, event.AggregateID = "Order", id
			ids, err := writer.Write(ctx, tx, event)
			if err != nil {
				return err
			}
			if declined {
				return errors.New("payment declined")
			}
			eventID = ids[0]
			return nil
		})
		return eventID, err
	}

	id, err := placeOrder("order-1", false)
	fmt.Println("order-1:", err)
	_, err = placeOrder("order-2", true)
	fmt.Println("order-2:", err)

	e, err := store.Get(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(e.Status, e.Topic, e.AggregateType, e.AggregateID, string(e.PayloadJSON))
	n, _, err := store.Backlog(ctx, string(OrderCreated))
	if err != nil {
		panic(err)
	}
	fmt.Println("pending:", n)
	// Output:
	// order-1: <nil>
	// order-2: payment declined
	// NEW OrderCreated Order order-1 {"orderId":"order-1"}
	// pending: 1
}

// Write validates the whole batch before it writes anything: an invalid
// envelope fails it with a ValidationError that says which one and why.
func ExampleWriter_Write() {
	ctx := context.Background()
	store, writer, closeDB := exampleWriter(ctx)
	defer closeDB()

	order, err := outbox.MarshalJSON(OrderCreated, map[string]int{"order": 42})
	if err != nil {
		panic(err)
	}
	err = store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, order, outbox.Envelope{Type: OrderCreated})
		return err
	})
	fmt.Println(err)
	var verr *outbox.ValidationError
	if errors.As(err, &verr) {
		fmt.Println("index:", verr.Index, "field:", verr.Field, "invalid envelope:", errors.Is(err, outbox.ErrInvalidEnvelope))
	}

	var id string
	err = store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		ids, err := writer.Write(ctx, tx, order)
		if err == nil {
			id = ids[0]
		}
		return err
	})
	if err != nil {
		panic(err)
	}
	e, err := store.Get(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println("id length:", len(e.ID))
	fmt.Println("topic:", e.Topic)
	fmt.Println("aggregate type:", e.AggregateType)
	fmt.Println("payload:", string(e.Payload()), "JSON:", e.IsJSON())
	// Output:
	// outbox: invalid envelope 1: PayloadJSON: set one of PayloadJSON and PayloadBytes
	// index: 1 field: PayloadJSON invalid envelope: true
	// id length: 26
	// topic: OrderCreated
	// aggregate type: __GLOBAL__
	// payload: {"order":42} JSON: true
}

type tenantKey struct{}

// A BeforeWrite hook stamps every event with the tenant of the request
// that writes it, and refuses writes made outside a request: the write
// fails with the hook's error, and nothing is written.
func ExampleWriterConfig_beforeWrite() {
	ctx := context.Background()
	store, _, closeDB := exampleStore(ctx)
	defer closeDB()
	errNoTenant := errors.New("no tenant in the context")
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{
		BeforeWrite: []func(context.Context, []outbox.Envelope) error{
			func(ctx context.Context, events []outbox.Envelope) error {
				tenant, ok := ctx.Value(tenantKey{}).(string)
				if !ok {
					return errNoTenant
				}
				for i := range events {
					if events[i].Headers == nil {
						events[i].Headers = map[string]string{}
					}
					events[i].Headers["tenant"] = tenant
				}
				return nil
			},
		},
	})
	if err != nil {
		panic(err)
	}
	write := func(ctx context.Context) (id string, err error) {
		err = store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			ids, err := writer.Write(ctx, tx, outbox.NewJSON(OrderCreated, []byte(`{"order":1}`)))
			if err == nil {
				id = ids[0]
			}
			return err
		})
		return id, err
	}

	id, err := write(context.WithValue(ctx, tenantKey{}, "acme"))
	if err != nil {
		panic(err)
	}
	e, err := store.Get(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println("tenant header:", e.Headers["tenant"])
	_, err = write(ctx)
	fmt.Println(err, errors.Is(err, errNoTenant))
	// Output:
	// tenant header: acme
	// outbox: before write: hook 0: no tenant in the context true
}

// A hook registered in a transaction runs after its commit, and not at
// all when it rolls back.
func ExampleAfterCommit() {
	ctx := context.Background()
	store, _, closeDB := exampleStore(ctx)
	defer closeDB()

	for _, fail := range []bool{false, true} {
		err := store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			err := outbox.AfterCommit(ctx, func(context.Context) error {
				fmt.Println("committed")
				return nil
			})
			if err != nil {
				return err
			}
			fmt.Println("in the transaction")
			if fail {
				return errors.New("rolled back")
			}
			return nil
		})
		fmt.Println("InTx:", err)
	}
	// Output:
	// in the transaction
	// committed
	// InTx: <nil>
	// in the transaction
	// InTx: rolled back
}

// A hook registered for a rollback undoes what the transaction did
// outside the database (here, a reservation held in memory) when the
// transaction fails; after a commit it never runs.
func ExampleAfterRollback() {
	ctx := context.Background()
	store, _, closeDB := exampleStore(ctx)
	defer closeDB()

	reserved := map[string]bool{}
	reserve := func(ctx context.Context, sku string) error {
		reserved[sku] = true
		return outbox.AfterRollback(ctx, func(context.Context) error {
			delete(reserved, sku)
			fmt.Println("released", sku)
			return nil
		})
	}
	for _, order := range []struct {
		sku  string
		fail bool
	}{{"book", false}, {"lamp", true}} {
		err := store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if err := reserve(ctx, order.sku); err != nil {
				return err
			}
			if order.fail {
				return errors.New("payment declined")
			}
			return nil
		})
		fmt.Println(order.sku, "InTx:", err)
	}
	fmt.Println("reserved:", reserved)
	// Output:
	// book InTx: <nil>
	// released lamp
	// lamp InTx: payment declined
	// reserved: map[book:true]
}

// A consumer records each event it processed in the transaction of its
// own writes: an event delivered twice has its effects once.
func ExampleStore_MarkProcessed() {
	ctx := context.Background()
	store, _, closeDB := exampleStore(ctx)
	defer closeDB()

	for range 2 {
		err := store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			isNew, err := store.MarkProcessed(ctx, tx, "billing", "01JD7XQ0GJ3V9Y6T0W8R2M4K5N")
			if err != nil {
				return err
			}
			if !isNew {
				fmt.Println("seen already: skip")
				return nil
			}
			fmt.Println("first delivery: process")
			return nil // the consumer's own writes go in tx too
		})
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// first delivery: process
	// seen already: skip
}

// Every relay process runs the retention; one at a time purges, under a
// lease on the table. DONE events go after 7 days by default; here after
// 3, and DEAD events after 30 rather than never.
func ExampleStore_Retain() {
	store, _, closeDB := exampleStore(context.Background())
	defer closeDB()

	ctx, stop := context.WithCancel(context.Background())
	retained := make(chan error, 1)
	go func() {
		retained <- store.Retain(ctx, outbox.RetentionConfig{
			Done: 3 * 24 * time.Hour,
			Dead: 30 * 24 * time.Hour,
			// Metrics: prommetrics' outbox_purged_rows_total{kind}.
		})
	}()

	// ... the service runs; at shutdown:
	stop()
	if err := <-retained; err != nil {
		panic(err) // an invalid config: Retain returns nothing else
	}
}

// An operator asks what happened to one order: its events, whatever their
// status, newest first, a page at a time.
func ExampleStore_AggregateEvents() {
	ctx := context.Background()
	store, _, closeDB := exampleStore(ctx)
	defer closeDB()
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		panic(err)
	}
	for _, step := range []struct {
		typ   outbox.EventType
		order string
	}{{"OrderCreated", "order-7"}, {"OrderCreated", "order-8"}, {"OrderPaid", "order-7"}, {"OrderShipped", "order-7"}} {
		err := store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			event := outbox.NewJSON(step.typ, []byte(`{}`))
			event.AggregateType, event.AggregateID = "Order", step.order
			_, err := writer.Write(ctx, tx, event)
			return err
		})
		if err != nil {
			panic(err)
		}
	}

	q := outbox.AggregateQuery{Type: "Order", ID: "order-7", Limit: 2}
	for {
		page, err := store.AggregateEvents(ctx, q)
		if err != nil {
			panic(err)
		}
		for _, e := range page.Events {
			fmt.Println(e.Type, e.Status)
		}
		if page.Next.IsZero() {
			break
		}
		fmt.Println("-- next page")
		q.Before = page.Next // page.Next.String() in a URL or on a command line
	}
	// Output:
	// OrderShipped NEW
	// OrderPaid NEW
	// -- next page
	// OrderCreated NEW
}

// Permanent and RetryAfter tell a relay what a handler's error means.
func ExamplePermanent() {
	rejected := outbox.Permanent(errors.New("unknown currency"))
	limited := outbox.RetryAfter(30*time.Second, errors.New("rate limited"))
	for _, err := range []error{rejected, limited, errors.New("broker down")} {
		delay, later := outbox.RetryAfterDelay(err)
		fmt.Printf("%v: permanent %t, retry after %v (%t)\n", err, outbox.IsPermanent(err), delay, later)
	}
	// Output:
	// permanent: unknown currency: permanent true, retry after 0s (false)
	// retry after 30s: rate limited: permanent false, retry after 30s (true)
	// broker down: permanent false, retry after 0s (false)
}

// The zero Backoff is the default policy; another schedule is a few
// fields away. NoJitter makes the delays predictable.
func ExampleBackoff() {
	policies := []struct {
		name   string
		policy outbox.RetryPolicy
	}{
		{"default", outbox.Backoff{NoJitter: true}},
		{"100 ms doubling, 5 attempts", outbox.Backoff{Base: 100 * time.Millisecond, MaxAttempts: 5, NoJitter: true}},
	}
	for _, p := range policies {
		fmt.Print(p.name, ":")
		for attempts := 1; ; attempts++ {
			delay, ok := p.policy.NextRetry(attempts)
			if !ok {
				fmt.Printf(" DEAD after %d failures\n", attempts)
				break
			}
			fmt.Print(" ", delay)
		}
	}
	// Output:
	// default: 200ms 400ms 800ms 1.6s 3.2s 6.4s 12.8s 25.6s 51.2s DEAD after 10 failures
	// 100 ms doubling, 5 attempts: 100ms 200ms 400ms 800ms DEAD after 5 failures
}

// exampleWriter returns a store as exampleStore does, a writer on it
// with the default configuration, and the function that drops the
// database.
func exampleWriter(ctx context.Context) (*postgres.Store, *outbox.Writer[pgx.Tx], func()) {
	store, _, closeDB := exampleStore(ctx)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		closeDB()
		panic(err)
	}
	return store, writer, closeDB
}

// exampleStore returns a store on a migrated PostgreSQL database of its
// own, its pool, and the function that drops it.
func exampleStore(ctx context.Context) (*postgres.Store, *pgxpool.Pool, func()) {
	url, drop := testdb.ForExample()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	store, err := postgres.NewStore(pool, postgres.Config{})
	if err != nil {
		panic(err)
	}
	return store, pool, func() {
		pool.Close()
		drop()
	}
}

// A command retried by its caller (a client that timed out and sent the
// same request again) writes its event once: the retry's event carries
// the same idempotency key, is skipped, and the command answers with the
// event id of the first try. The retry's transaction commits as usual;
// with WriterConfig.RejectDuplicateKeys it would get ErrDuplicateKey
// instead, its transaction still usable.
func ExampleWriter_WriteDetailed() {
	ctx := context.Background()
	store, writer, closeDB := exampleWriter(ctx)
	defer closeDB()

	// requestID comes from the client, the same on every try.
	placeOrder := func(requestID string) (eventID string, retried bool) {
		err := store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			event := outbox.NewJSON(OrderCreated, []byte(`{"orderId":"order-1"}`))
			event.IdempotencyKey = requestID
			res, err := writer.WriteDetailed(ctx, tx, event)
			if err != nil {
				return err
			}
			eventID, retried = res.IDs[0], len(res.Skipped) > 0
			return nil
		})
		if err != nil {
			panic(err)
		}
		return eventID, retried
	}

	first, retried := placeOrder("request-7")
	fmt.Println("first try, a retry:", retried)
	again, retried := placeOrder("request-7")
	fmt.Println("second try, a retry:", retried, "same event:", again == first)
	n, _, err := store.Backlog(ctx, string(OrderCreated))
	if err != nil {
		panic(err)
	}
	fmt.Println("events:", n)
	// Output:
	// first try, a retry: false
	// second try, a retry: true same event: true
	// events: 1
}
