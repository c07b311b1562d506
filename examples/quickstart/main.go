// Command quickstart is an order service in miniature: it creates orders
// and their OrderCreated events in one transaction each, relays the events
// through the outbox to Kafka, reads them back with an independent Kafka
// client, and prints "delivered N/N events" when every event written
// arrived (matched by event id).
//
// With no flags it needs no server: the outbox lives in an embedded SQLite
// database and Kafka is an in-process Kafka-protocol broker (kfake).
//
//	go run ./examples/quickstart
//	go run ./examples/quickstart -database-url postgres://postgres@127.0.0.1:5432/postgres -brokers localhost:9092
//	go run ./examples/quickstart -database-url 'mysql://root@tcp(127.0.0.1:3306)/test?interpolateParams=true'
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmoutbox/wmoutbox/forward"
	"github.com/wmoutbox/wmoutbox/forward/kafkaforward"
	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

const (
	outboxTopic = "orders"     // the outbox (Watermill) topic
	kafkaTopic  = "shop.Order" // where forward.ByAggregateType("shop.") sends Order events
	waitLimit   = 30 * time.Second
)

func main() {
	databaseURL := flag.String("database-url", "", "PostgreSQL URL (postgres://…) or MySQL/MariaDB DSN after mysql:// (mysql://user@tcp(host:3306)/db); default: an embedded SQLite database in a temporary directory")
	brokers := flag.String("brokers", "", "Kafka brokers, comma separated; default: an in-process Kafka-protocol broker")
	orders := flag.Int("orders", 100, "how many orders to create")
	flag.Parse()

	// Ctrl-C or a stop ends ctx, and run returns through its deferred
	// clean-up (the temporary directory of the SQLite database included).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *databaseURL, *brokers, *orders); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, databaseURL, brokerList string, orders int) error {
	if orders <= 0 {
		return fmt.Errorf("-orders must be positive, got %d", orders)
	}
	brokers, stopBroker, err := kafkaBrokers(brokerList)
	if err != nil {
		return err
	}
	defer stopBroker()

	if strings.HasPrefix(databaseURL, "postgres://") || strings.HasPrefix(databaseURL, "postgresql://") {
		return runOnPostgres(ctx, databaseURL, brokers, orders)
	}
	if dsn, ok := strings.CutPrefix(databaseURL, "mysql://"); ok {
		return runOnMySQL(ctx, dsn, brokers, orders)
	}
	if databaseURL != "" {
		return fmt.Errorf("-database-url must be a postgres:// URL, mysql:// and a MySQL DSN, or empty for SQLite; got %q", databaseURL)
	}
	return runOnSQLite(ctx, brokers, orders)
}

// kafkaBrokers returns the brokers to use, starting an in-process one when
// none is given.
func kafkaBrokers(list string) ([]string, func(), error) {
	if list != "" {
		return strings.Split(list, ","), func() {}, nil
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		return nil, nil, fmt.Errorf("start the in-process Kafka broker: %w", err)
	}
	return cluster.ListenAddrs(), cluster.Close, nil
}

func runOnSQLite(ctx context.Context, brokers []string, orders int) error {
	dir, err := os.MkdirTemp("", "wmoutbox-quickstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(ctx, filepath.Join(dir, "shop.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := sqliteShop(ctx, db)
	if err != nil {
		return err
	}
	fmt.Println("outbox: embedded SQLite in", dir)
	return relay(ctx, store, insertOrderSQLite, brokers, orders)
}

// sqliteShop migrates the outbox table and creates the orders table in
// db, and returns the store on it.
func sqliteShop(ctx context.Context, db *sql.DB) (*sqlite.Store, error) {
	if err := sqlite.Migrate(ctx, db, sqlite.Config{}); err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, total_cents INTEGER NOT NULL)`); err != nil {
		return nil, err
	}
	return sqlite.NewStore(db, sqlite.Config{})
}

// insertOrderSQLite creates o in SQLite's orders table.
func insertOrderSQLite(ctx context.Context, tx *sql.Tx, o order) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total_cents) VALUES (?, ?)`, o.ID, o.TotalCents)
	return err
}

func runOnPostgres(ctx context.Context, url string, brokers []string, orders int) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	// Tables of its own, emptied of what an earlier run left, so that
	// reruns start clean and nothing else in the database is touched.
	cfg := postgres.Config{Table: "example_quickstart_outbox"}
	if err := postgres.Migrate(ctx, pool, cfg); err != nil {
		return err
	}
	for _, sql := range []string{
		`CREATE TABLE IF NOT EXISTS example_quickstart_orders (id text PRIMARY KEY, total_cents bigint NOT NULL)`,
		`DELETE FROM example_quickstart_orders`,
		`DELETE FROM example_quickstart_outbox`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			return fmt.Errorf("prepare tables: %w", err)
		}
	}
	store, err := postgres.NewStore(pool, cfg)
	if err != nil {
		return err
	}
	fmt.Println("outbox: PostgreSQL, tables example_quickstart_outbox and example_quickstart_orders")
	return relay(ctx, store, func(ctx context.Context, tx pgx.Tx, o order) error {
		_, err := tx.Exec(ctx, `INSERT INTO example_quickstart_orders (id, total_cents) VALUES ($1, $2)`, o.ID, o.TotalCents)
		return err
	}, brokers, orders)
}

func runOnMySQL(ctx context.Context, dsn string, brokers []string, orders int) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	// Tables of its own, emptied as on PostgreSQL.
	cfg := mysql.Config{Table: "example_quickstart_outbox"}
	if err := mysql.Migrate(ctx, db, cfg); err != nil {
		return err
	}
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS example_quickstart_orders (id varchar(64) PRIMARY KEY, total_cents bigint NOT NULL)`,
		`DELETE FROM example_quickstart_orders`,
		`DELETE FROM example_quickstart_outbox`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("prepare tables: %w", err)
		}
	}
	store, err := mysql.NewStore(db, cfg)
	if err != nil {
		return err
	}
	fmt.Println("outbox: MySQL, tables example_quickstart_outbox and example_quickstart_orders")
	return relay(ctx, store, func(ctx context.Context, tx *sql.Tx, o order) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO example_quickstart_orders (id, total_cents) VALUES (?, ?)`, o.ID, o.TotalCents)
		return err
	}, brokers, orders)
}

type order struct {
	ID         string
	TotalCents int64
}

// relay is the same on every store: the business writes, the outbox relay
// forwarding to Kafka, and an independent consumer checking what arrived.
func relay[Tx any](ctx context.Context, store *outbox.Store[Tx], createOrder func(context.Context, Tx, order) error, brokers []string, orders int) error {
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{})
	if err != nil {
		return err
	}
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: sub})
	if err != nil {
		return err
	}
	kafkaPub, err := kafkaforward.NewPublisher(brokers, kafkaforward.Config{})
	if err != nil {
		return err
	}
	defer kafkaPub.Close()
	toKafka, err := forward.Handler(forward.Config{Publisher: kafkaPub, Topic: forward.ByAggregateType("shop.")})
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router.AddMiddleware(outboxmw.RecordErrors)
	router.AddConsumerHandler("orders-to-kafka", outboxTopic, sub, toKafka)
	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-routerDone:
		return fmt.Errorf("router stopped at start: %w", err)
	}
	defer func() {
		_ = router.Close() // closes the subscriber
		if err := <-routerDone; err != nil {
			fmt.Fprintln(os.Stderr, "router:", err)
		}
	}()

	// The service: each order and its event commit together.
	written := make(map[string]bool, orders)
	var ids []string // the event ids, in the order written
	for i := range orders {
		o := order{ID: fmt.Sprintf("order-%04d", i+1), TotalCents: int64(1000 + i)}
		eventID, err := placeOrder(ctx, store, pub, createOrder, o)
		if err != nil {
			return fmt.Errorf("create %s: %w", o.ID, err)
		}
		written[eventID] = true
		ids = append(ids, eventID)
	}

	got, err := consume(ctx, brokers, written)
	fmt.Printf("delivered %d/%d events\n", len(got), len(written))
	if err == nil && len(got) != len(written) {
		err = errors.New("not every event arrived")
	}
	if err != nil {
		for _, id := range ids {
			if !got[id] {
				return fmt.Errorf("%w; %s", err, eventState(context.WithoutCancel(ctx), store, id))
			}
		}
	}
	return err
}

// placeOrder is the service's command: it creates o and writes its
// OrderCreated event in one transaction, and returns the event's id.
func placeOrder[Tx any](ctx context.Context, store *outbox.Store[Tx], pub message.Publisher, createOrder func(context.Context, Tx, order) error, o order) (string, error) {
	eventID := outbox.NewID()
	err := store.InTx(ctx, func(ctx context.Context, tx Tx) error {
		if err := createOrder(ctx, tx, o); err != nil {
			return err
		}
		msg := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"orderId":%q,"totalCents":%d}`, o.ID, o.TotalCents))
		msg.Metadata.Set(watermilladapter.MetadataEventID, eventID)
		msg.Metadata.Set(watermilladapter.MetadataEventType, "OrderCreated")
		msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
		msg.Metadata.Set(watermilladapter.MetadataAggregateID, o.ID)
		msg.SetContext(ctx) // carries tx to the publisher
		return pub.Publish(outboxTopic, msg)
	})
	return eventID, err
}

// eventState says where the outbox has an event: its status, attempts and
// last error, which tell why it did not arrive.
func eventState[Tx any](ctx context.Context, store *outbox.Store[Tx], id string) string {
	e, err := store.Get(ctx, id)
	if err != nil {
		return "cannot read event " + id + ": " + err.Error()
	}
	state := fmt.Sprintf("event %s is %s after %d failed attempts", id, e.Status, e.Attempts)
	if e.LastError != "" {
		state += "; last error: " + e.LastError
	}
	return state
}

// consume reads the Kafka topic with franz-go, a client independent of the
// relay's, until every written event id has arrived or the time is up, and
// returns the ids that arrived.
func consume(ctx context.Context, brokers []string, want map[string]bool) (map[string]bool, error) {
	got := map[string]bool{}
	client, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(kafkaTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return got, err
	}
	defer client.Close()
	waitCtx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	var fetchErr error // the last the consumer met: the topic missing, a broker down
	for len(got) < len(want) {
		fetches := client.PollFetches(waitCtx)
		if err := ctx.Err(); err != nil {
			return got, err
		}
		if waitCtx.Err() != nil {
			if fetchErr != nil {
				return got, fmt.Errorf("waited %s for the events (the consumer's last error: %w)", waitLimit, fetchErr)
			}
			return got, fmt.Errorf("waited %s for the events", waitLimit)
		}
		fetches.EachError(func(_ string, _ int32, err error) { fetchErr = err })
		fetches.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == watermilladapter.MetadataEventID && want[string(h.Value)] {
					got[string(h.Value)] = true
				}
			}
		})
	}
	return got, nil
}
