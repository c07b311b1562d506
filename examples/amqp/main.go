// Command amqp relays outbox events from PostgreSQL to RabbitMQ.
//
// It creates orders for a handful of customers, each order and its
// OrderPlaced event in one transaction, relays the events through a
// Watermill router to a durable RabbitMQ queue with amqpforward (publisher
// confirms, persistent messages), reads them back with amqp091-go, a client
// independent of the relay's, and matches each message to the event written
// by its outbox_event_id header and its AMQP MessageId. It ends with
// "delivered N/N events" and exits 0, or exits 1 saying what went wrong.
//
// The forwarder sits behind forward.Lazy: with RabbitMQ down the relay
// still starts, and the events wait in the outbox table (RETRY, with the
// connection error in last_error) instead of the process failing; the
// program then says so and exits 1.
//
//	go run ./examples/amqp
//	go run ./examples/amqp -database-url 'postgres://user:password@db:5432/shop?sslmode=disable' -amqp-url amqp://user:password@rabbit:5672/
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	neturl "net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/wmoutbox/wmoutbox/forward"
	"github.com/wmoutbox/wmoutbox/forward/amqpforward"
	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

const (
	defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	defaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"

	// This example's own tables and queue, so that it clashes with no
	// other program or test. All three are emptied at start.
	outboxTable = "example_amqp_outbox"
	ordersTable = "example_amqp_orders"
	queue       = "wmoutbox.example.orders"

	outboxTopic = "orders" // the outbox (Watermill) topic
	aggregate   = "Customer"
	eventType   = "OrderPlaced"

	customers     = 5 // the aggregates the orders are spread over
	connectLimit  = 5 * time.Second
	deliveryLimit = 30 * time.Second
)

func main() {
	databaseURL := flag.String("database-url", defaultDatabaseURL, "PostgreSQL URL")
	amqpURL := flag.String("amqp-url", defaultAMQPURL, "RabbitMQ URL")
	orders := flag.Int("orders", 60, "how many orders to create")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *databaseURL, *amqpURL, *orders); err != nil {
		fmt.Fprintln(os.Stderr, "examples/amqp:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, databaseURL, amqpURL string, orders int) error {
	if orders <= 0 {
		return fmt.Errorf("-orders must be positive, got %d", orders)
	}
	broker, err := brokerName(amqpURL)
	if err != nil {
		return err
	}

	pool, err := connectPostgres(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := prepareTables(ctx, pool)
	if err != nil {
		return err
	}

	// The independent consumer connects first: it empties the queue of
	// what earlier runs left, then waits for this run's messages. If
	// RabbitMQ is down, the run goes on without it, to show that the
	// relay starts anyway and the events wait in the outbox.
	consumer, brokerErr := startConsumer(amqpURL)
	if brokerErr == nil {
		defer consumer.close()
		fmt.Printf("RabbitMQ: %s, queue %s (purged %d left over)\n", broker, queue, consumer.purged)
	} else {
		fmt.Printf("RabbitMQ: cannot connect to %s: %v\n", broker, brokerErr)
	}

	// The forwarder connects on its first publish (forward.Lazy), and
	// declares the queue then (Config.Queues): until a queue exists, its
	// events fail with amqpforward.ErrUnroutable and wait in the outbox.
	amqpPub := forward.Lazy(func() (message.Publisher, error) {
		return amqpforward.NewPublisher(amqpURL, amqpforward.Config{
			Queues: []string{queue},
			Dial:   &amqp091.Config{Dial: amqp091.DefaultDial(connectLimit)},
		})
	})
	defer amqpPub.Close()

	// The relay: the outbox subscriber feeds a router whose one handler
	// publishes each event to the queue (through the default exchange,
	// routing key = queue name). RecordErrors stores a failed publish in
	// last_error.
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		PollInterval: 500 * time.Millisecond, // retries are picked up quickly
	})
	if err != nil {
		return err
	}
	defer sub.Close()
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: sub})
	if err != nil {
		return err
	}
	toRabbitMQ, err := forward.Handler(forward.Config{
		Publisher: amqpPub,
		Topic:     func(*message.Message) (string, error) { return queue, nil }, // must be one of Config.Queues
	})
	if err != nil {
		return err
	}
	stopRouter, err := startRouter(ctx, sub, toRabbitMQ)
	if err != nil {
		return err
	}
	defer stopRouter()

	// The service: each order and its event commit together.
	written, err := createOrders(ctx, store, pub, orders)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %d orders for %d customers, one transaction each (order row + %s event)\n", orders, customers, eventType)

	if brokerErr != nil {
		// forward.Lazy at work: the relay runs, each delivery fails with
		// the connection error, and the events stay pending.
		fmt.Printf("outbox: %s\n", waitAttempted(ctx, pool, len(written)))
		fmt.Printf("the relay kept running: the events wait in %s and are retried with backoff until RabbitMQ answers\n", outboxTable)
		fmt.Printf("delivered 0/%d events\n", len(written))
		return fmt.Errorf("cannot connect to RabbitMQ at %s: %w (start it, or set -amqp-url to the right host and credentials, e.g. -amqp-url amqp://user:password@host:5672/)",
			broker, brokerErr)
	}

	got, readErr := consumer.readBack(ctx, written)
	if readErr != nil {
		readErr = fmt.Errorf("%w; outbox: %s", readErr, outboxState(ctx, pool))
	}
	matchErr := got.print()
	if readErr == nil {
		readErr = waitDone(ctx, pool, len(written))
	}
	fmt.Printf("delivered %d/%d events\n", len(got.count), len(written))
	return errors.Join(readErr, matchErr)
}

// brokerName names the broker of url by host, port and virtual host,
// without the credentials.
func brokerName(url string) (string, error) {
	uri, err := amqp091.ParseURI(url)
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err // a url.Error quotes the whole URL, password included
		}
		return "", fmt.Errorf("invalid -amqp-url (not shown, it may hold a password): %w", err)
	}
	where := net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
	if uri.Vhost != "/" {
		where += " vhost " + strconv.Quote(uri.Vhost)
	}
	return where, nil
}

// connectPostgres opens a pool on url and checks that the server answers.
func connectPostgres(ctx context.Context, url string) (*pgxpool.Pool, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("invalid -database-url: %w", err)
	}
	cc := pool.Config().ConnConfig
	where := fmt.Sprintf("%s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database) // no password
	pingCtx, cancel := context.WithTimeout(ctx, connectLimit)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("PostgreSQL at %s is not reachable: %w (start it, or set -database-url, e.g. -database-url 'postgres://user:password@host:5432/dbname?sslmode=disable')",
			where, err)
	}
	fmt.Printf("PostgreSQL: %s, outbox table %s\n", where, outboxTable)
	return pool, nil
}

// prepareTables migrates the example's outbox table, creates its orders
// table, and deletes what an earlier run left in both.
func prepareTables(ctx context.Context, pool *pgxpool.Pool) (*postgres.Store, error) {
	cfg := postgres.Config{Table: outboxTable}
	if err := postgres.Migrate(ctx, pool, cfg); err != nil {
		return nil, fmt.Errorf("migrate the outbox table: %w", err)
	}
	for _, sql := range []string{
		`CREATE TABLE IF NOT EXISTS ` + ordersTable + ` (id text PRIMARY KEY, customer_id text NOT NULL, total_cents bigint NOT NULL)`,
		`DELETE FROM ` + ordersTable,
		`DELETE FROM ` + outboxTable,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("prepare tables: %w", err)
		}
	}
	return postgres.NewStore(pool, cfg)
}

// startRouter runs a router with handler on the outbox topic until the
// returned function is called.
func startRouter(ctx context.Context, sub message.Subscriber, handler message.NoPublishHandlerFunc) (func(), error) {
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	router.AddMiddleware(outboxmw.RecordErrors)
	router.AddConsumerHandler("orders-to-rabbitmq", outboxTopic, sub, handler)
	done := make(chan error, 1)
	go func() { done <- router.Run(context.WithoutCancel(ctx)) }()
	select {
	case <-router.Running():
	case err := <-done:
		return nil, fmt.Errorf("router stopped at start: %w", err)
	}
	return func() {
		_ = router.Close()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "router:", err)
		}
	}, nil
}

// createOrders writes orders, each order row and its event in one
// transaction, and returns the customer of each event id.
func createOrders(ctx context.Context, store *postgres.Store, pub *watermilladapter.Publisher[pgx.Tx], orders int) (map[string]string, error) {
	written := make(map[string]string, orders)
	for i := range orders {
		orderID := fmt.Sprintf("order-%04d", i+1)
		customerID := fmt.Sprintf("customer-%d", i%customers+1)
		totalCents := int64(1000 + 7*i)
		eventID := outbox.NewID()
		err := store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO `+ordersTable+` (id, customer_id, total_cents) VALUES ($1, $2, $3)`,
				orderID, customerID, totalCents); err != nil {
				return err
			}
			msg := message.NewMessage(watermill.NewUUID(),
				fmt.Appendf(nil, `{"orderId":%q,"customerId":%q,"totalCents":%d}`, orderID, customerID, totalCents))
			msg.Metadata.Set(watermilladapter.MetadataEventID, eventID)
			msg.Metadata.Set(watermilladapter.MetadataEventType, eventType)
			msg.Metadata.Set(watermilladapter.MetadataAggregateType, aggregate)
			msg.Metadata.Set(watermilladapter.MetadataAggregateID, customerID)
			msg.SetContext(ctx) // carries tx to the publisher
			return pub.Publish(outboxTopic, msg)
		})
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", orderID, err)
		}
		written[eventID] = customerID
	}
	return written, nil
}

// consumer reads the queue with amqp091-go alone: no Watermill, no
// wmoutbox code.
type consumer struct {
	conn       *amqp091.Connection
	ch         *amqp091.Channel
	deliveries <-chan amqp091.Delivery
	purged     int
}

func startConsumer(url string) (*consumer, error) {
	conn, err := amqp091.DialConfig(url, amqp091.Config{Dial: amqp091.DefaultDial(connectLimit)})
	if err != nil {
		return nil, err
	}
	c := &consumer{conn: conn}
	if err := c.setUp(); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return c, nil
}

func (c *consumer) setUp() error {
	var err error
	if c.ch, err = c.conn.Channel(); err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	// The same declaration as the forwarder's (durable, not auto-deleted,
	// not exclusive, no arguments): RabbitMQ refuses a mismatch.
	if _, err := c.ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare queue %s: %w", queue, err)
	}
	if c.purged, err = c.ch.QueuePurge(queue, false); err != nil {
		return fmt.Errorf("purge queue %s: %w", queue, err)
	}
	if err := c.ch.Qos(100, 0, false); err != nil {
		return fmt.Errorf("set prefetch: %w", err)
	}
	if c.deliveries, err = c.ch.Consume(queue, "", false, false, false, false, nil); err != nil {
		return fmt.Errorf("consume queue %s: %w", queue, err)
	}
	return nil
}

func (c *consumer) close() {
	_ = c.conn.Close()
}

// received is what the consumer saw of the events written.
type received struct {
	count      map[string]int    // event id → copies received
	customer   map[string]string // event id → customer (as written)
	mismatched []string          // messages whose MessageId is not their outbox_event_id
	sample     *amqp091.Delivery // the first message of this run
}

// readBack acks messages until every written event id has arrived or the
// time is up. Messages that are not this run's are acked and skipped.
func (c *consumer) readBack(ctx context.Context, want map[string]string) (received, error) {
	got := received{count: map[string]int{}, customer: want}
	timeout := time.NewTimer(deliveryLimit)
	defer timeout.Stop()
	for len(got.count) < len(want) {
		select {
		case d, ok := <-c.deliveries:
			if !ok {
				return got, fmt.Errorf("the broker closed the consumer of %s", queue)
			}
			if err := d.Ack(false); err != nil {
				return got, fmt.Errorf("ack: %w", err)
			}
			id, _ := d.Headers[watermilladapter.MetadataEventID].(string)
			if _, ours := want[id]; !ours {
				continue
			}
			if d.MessageId != id {
				got.mismatched = append(got.mismatched, fmt.Sprintf("MessageId %q with %s %q", d.MessageId, watermilladapter.MetadataEventID, id))
			}
			if got.sample == nil {
				got.sample = &d
			}
			got.count[id]++
		case <-timeout.C:
			return got, fmt.Errorf("%d of %d events did not arrive on %s within %s",
				len(want)-len(got.count), len(want), queue, deliveryLimit)
		case <-ctx.Done():
			return got, ctx.Err()
		}
	}
	return got, nil
}

// print shows the events received per customer and one message, and says
// whether every message carried its event id as MessageId.
func (got received) print() error {
	fmt.Printf("read back with amqp091-go from queue %s:\n", queue)
	perCustomer := map[string]int{}
	copies := 0
	for id, n := range got.count {
		perCustomer[got.customer[id]]++
		copies += n
	}
	for _, customer := range slices.Sorted(maps.Keys(perCustomer)) {
		fmt.Printf("  %-12s  %d events\n", customer, perCustomer[customer])
	}
	if dup := copies - len(got.count); dup > 0 {
		fmt.Printf("  (%d duplicate messages: delivery is at least once; consumers deduplicate by %s)\n",
			dup, watermilladapter.MetadataEventID)
	}
	if d := got.sample; d != nil {
		mode := "transient"
		if d.DeliveryMode == amqp091.Persistent {
			mode = "persistent"
		}
		fmt.Printf("  one message: MessageId %s (= header %s), Type %s, %s\n",
			d.MessageId, watermilladapter.MetadataEventID, d.Type, mode)
		fmt.Printf("               body %s\n", d.Body)
	}
	if len(got.mismatched) > 0 {
		return fmt.Errorf("%d messages whose MessageId is not their event id, such as %s", len(got.mismatched), got.mismatched[0])
	}
	return nil
}

// waitDone waits until the relay has recorded every event DONE: it does so
// right after the broker confirmed the publish, so at most moments after
// the consumer saw the message.
func waitDone(ctx context.Context, pool *pgxpool.Pool, want int) error {
	deadline := time.Now().Add(deliveryLimit)
	for {
		var done int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+outboxTable+` WHERE status = $1`, int16(outbox.StatusDone)).Scan(&done); err != nil {
			return fmt.Errorf("count DONE rows: %w", err)
		}
		if done == want {
			fmt.Printf("outbox rows DONE: %d/%d\n", done, want)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d outbox rows DONE after %s", done, want, deliveryLimit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitAttempted waits (a few seconds at most) until the relay has tried
// every event once, and describes the table then.
func waitAttempted(ctx context.Context, pool *pgxpool.Pool, want int) string {
	deadline := time.Now().Add(connectLimit)
	for time.Now().Before(deadline) {
		var tried int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM `+outboxTable+` WHERE attempts > 0 OR status = $1`, int16(outbox.StatusDone)).Scan(&tried)
		if err != nil || tried >= want {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return outboxState(ctx, pool)
}

// outboxState describes the example's outbox rows: how many in each status,
// and the last error of a pending one.
func outboxState(ctx context.Context, pool *pgxpool.Pool) string {
	rows, err := pool.Query(ctx, `SELECT status, count(*) FROM `+outboxTable+` GROUP BY status ORDER BY status`)
	if err != nil {
		return "cannot read " + outboxTable + ": " + err.Error()
	}
	counts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
		var status int16
		var n int
		err := row.Scan(&status, &n)
		return fmt.Sprintf("%d %s", n, outbox.Status(status)), err
	})
	if err != nil {
		return "cannot read " + outboxTable + ": " + err.Error()
	}
	state := strings.Join(counts, ", ")
	var lastError string
	err = pool.QueryRow(ctx, `SELECT last_error FROM `+outboxTable+` WHERE status IN ($1, $2) AND last_error IS NOT NULL LIMIT 1`,
		int16(outbox.StatusRetry), int16(outbox.StatusDead)).Scan(&lastError)
	if err == nil {
		state += "; last_error: " + lastError
	}
	return state
}
