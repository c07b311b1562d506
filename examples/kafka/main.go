// Command kafka relays outbox events from PostgreSQL to Kafka and shows
// that the events of one aggregate stay on one partition.
//
// It creates orders for a handful of customers, each order and its
// OrderPlaced event in one transaction (the customer is the event's
// aggregate), relays the events through a Watermill router to Kafka with
// kafkaforward (record key = aggregate id, topic by aggregate type), reads
// them back with franz-go, an independent Kafka client, and prints which
// partition each customer's events landed on. It ends with
// "delivered N/N events, every aggregate on one partition" and exits 0, or
// exits 1 saying what went wrong.
//
// It needs PostgreSQL; Kafka is an in-process broker (kfake) unless
// -brokers names a real one. With -delete-done the relay deletes each row
// once Kafka has the event (postgres.Config.DeleteDone), the setting for
// an outbox whose events Kafka keeps.
//
//	go run ./examples/kafka
//	go run ./examples/kafka -delete-done
//	go run ./examples/kafka -database-url 'postgres://user:password@db:5432/shop?sslmode=disable' -brokers localhost:9092
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
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
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmoutbox/wmoutbox/forward"
	"github.com/wmoutbox/wmoutbox/forward/kafkaforward"
	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

const (
	defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

	// This example's own tables, so that it clashes with no other program
	// or test on the same database. Both are emptied at start.
	outboxTable = "example_kafka_outbox"
	ordersTable = "example_kafka_orders"

	outboxTopic = "orders"            // the outbox (Watermill) topic
	topicPrefix = "wmoutbox.example." // forward.ByAggregateType(topicPrefix)
	aggregate   = "Customer"          // the aggregate type of every event
	kafkaTopic  = topicPrefix + aggregate
	eventType   = "OrderPlaced"

	customers     = 5 // the aggregates the orders are spread over
	kfakeParts    = 4 // partitions of the topic on the in-process broker
	connectLimit  = 5 * time.Second
	deliveryLimit = 30 * time.Second
)

func main() {
	databaseURL := flag.String("database-url", defaultDatabaseURL, "PostgreSQL URL")
	brokers := flag.String("brokers", "", "Kafka brokers, comma separated; default: an in-process Kafka-protocol broker")
	orders := flag.Int("orders", 60, "how many orders to create")
	deleteDone := flag.Bool("delete-done", false, "delete each outbox row once Kafka has its event, instead of keeping it DONE")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *databaseURL, *brokers, *orders, *deleteDone); err != nil {
		fmt.Fprintln(os.Stderr, "examples/kafka:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, databaseURL, brokerList string, orders int, deleteDone bool) error {
	if orders <= 0 {
		return fmt.Errorf("-orders must be positive, got %d", orders)
	}

	pool, err := connectPostgres(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := prepareTables(ctx, pool, deleteDone)
	if err != nil {
		return err
	}

	brokers, stopBroker, err := kafkaBrokers(brokerList)
	if err != nil {
		return err
	}
	defer stopBroker()
	kafkaPub, err := kafkaforward.NewPublisher(brokers, kafkaforward.Config{ClientID: "wmoutbox-example-kafka"})
	if err != nil {
		return fmt.Errorf("cannot reach Kafka at %s: %w (set -brokers to reachable brokers, or leave it out for an in-process broker)",
			strings.Join(brokers, ","), err)
	}
	defer kafkaPub.Close()

	// The relay: the outbox subscriber feeds a router whose one handler
	// publishes each event to Kafka, on the topic named after its
	// aggregate type. RecordErrors stores a failed publish in last_error.
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
	toKafka, err := forward.Handler(forward.Config{Publisher: kafkaPub, Topic: forward.ByAggregateType(topicPrefix)})
	if err != nil {
		return err
	}
	stopRouter, err := startRouter(ctx, sub, toKafka)
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

	got, readErr := readBack(ctx, brokers, written)
	if readErr != nil {
		readErr = fmt.Errorf("%w; outbox: %s", readErr, outboxState(ctx, pool))
	}
	splitErr := printPartitions(got)
	if readErr == nil {
		readErr = waitRecorded(ctx, pool, len(written), deleteDone)
	}

	delivered := len(got.partition)
	switch {
	case readErr != nil:
		fmt.Printf("delivered %d/%d events\n", delivered, len(written))
		return readErr
	case splitErr != nil:
		fmt.Printf("delivered %d/%d events, but not every aggregate on one partition\n", delivered, len(written))
		return splitErr
	}
	fmt.Printf("delivered %d/%d events, every aggregate on one partition\n", delivered, len(written))
	return nil
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
func prepareTables(ctx context.Context, pool *pgxpool.Pool, deleteDone bool) (*postgres.Store, error) {
	cfg := postgres.Config{Table: outboxTable, DeleteDone: deleteDone}
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

// kafkaBrokers returns the brokers to use, starting an in-process one with
// the topic already created when none is given.
func kafkaBrokers(list string) ([]string, func(), error) {
	if list != "" {
		brokers := strings.Split(list, ",")
		fmt.Printf("Kafka: %s, topic %s\n", list, kafkaTopic)
		return brokers, func() {}, nil
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(kfakeParts, kafkaTopic))
	if err != nil {
		return nil, nil, fmt.Errorf("start the in-process Kafka broker: %w", err)
	}
	fmt.Printf("Kafka: in-process broker (kfake) at %s, topic %s with %d partitions\n",
		strings.Join(cluster.ListenAddrs(), ","), kafkaTopic, kfakeParts)
	return cluster.ListenAddrs(), cluster.Close, nil
}

// startRouter runs a router with handler on the outbox topic until the
// returned function is called.
func startRouter(ctx context.Context, sub message.Subscriber, handler message.NoPublishHandlerFunc) (func(), error) {
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	router.AddMiddleware(outboxmw.RecordErrors)
	router.AddConsumerHandler("orders-to-kafka", outboxTopic, sub, handler)
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
			msg.Metadata.Set(watermilladapter.MetadataAggregateID, customerID) // the Kafka record key
			msg.SetContext(ctx)                                                // carries tx to the publisher
			return pub.Publish(outboxTopic, msg)
		})
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", orderID, err)
		}
		written[eventID] = customerID
	}
	return written, nil
}

// received is what the independent consumer saw of the events written.
type received struct {
	partition  map[string]int32         // event id → partition
	records    int                      // records of these events, duplicates included
	byCustomer map[string]map[int32]int // customer → partition → records
	badKeys    map[string]string        // customer → a record key that is not its id
}

// readBack reads the Kafka topic with franz-go, a client independent of the
// relay's, until every written event id has arrived or the time is up.
// Records of other runs (a real broker keeps them) are skipped.
func readBack(ctx context.Context, brokers []string, want map[string]string) (received, error) {
	got := received{
		partition:  map[string]int32{},
		byCustomer: map[string]map[int32]int{},
		badKeys:    map[string]string{},
	}
	client, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(kafkaTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return got, fmt.Errorf("kafka consumer: %w", err)
	}
	defer client.Close()
	waitCtx, cancel := context.WithTimeout(ctx, deliveryLimit)
	defer cancel()
	for len(got.partition) < len(want) {
		fetches := client.PollFetches(waitCtx)
		if err := ctx.Err(); err != nil {
			return got, err
		}
		if waitCtx.Err() != nil {
			return got, fmt.Errorf("%d of %d events did not arrive on %s within %s",
				len(want)-len(got.partition), len(want), kafkaTopic, deliveryLimit)
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			fmt.Fprintf(os.Stderr, "fetch %s[%d]: %v\n", topic, partition, err)
		})
		fetches.EachRecord(func(r *kgo.Record) {
			id := header(r, watermilladapter.MetadataEventID)
			customer, ok := want[id]
			if !ok {
				return
			}
			got.partition[id] = r.Partition
			got.records++
			if got.byCustomer[customer] == nil {
				got.byCustomer[customer] = map[int32]int{}
			}
			got.byCustomer[customer][r.Partition]++ // a duplicate counts again: it must be on the same partition
			if string(r.Key) != customer {
				got.badKeys[customer] = string(r.Key)
			}
		})
	}
	return got, nil
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// printPartitions prints aggregate → partition and the event count, and
// says whether some aggregate's events were split over partitions.
func printPartitions(got received) error {
	fmt.Printf("read back with franz-go from %s:\n", kafkaTopic)
	fmt.Printf("  %-12s  %-9s  %s\n", "aggregate", "partition", "events")
	var split []string
	for _, customer := range slices.Sorted(maps.Keys(got.byCustomer)) {
		parts := got.byCustomer[customer]
		var names []string
		total := 0
		for _, p := range slices.Sorted(maps.Keys(parts)) {
			names = append(names, strconv.Itoa(int(p)))
			total += parts[p]
		}
		fmt.Printf("  %-12s  %-9s  %d\n", customer, strings.Join(names, ","), total)
		if len(parts) > 1 {
			split = append(split, fmt.Sprintf("%s on partitions %s", customer, strings.Join(names, ",")))
		}
	}
	if dup := got.records - len(got.partition); dup > 0 {
		fmt.Printf("  (%d duplicate records: delivery is at least once; consumers deduplicate by %s)\n",
			dup, watermilladapter.MetadataEventID)
	}
	for customer, key := range got.badKeys {
		split = append(split, fmt.Sprintf("%s has a record keyed %q", customer, key))
	}
	if len(split) > 0 {
		return errors.New("an aggregate's events were not kept together: " + strings.Join(split, "; "))
	}
	return nil
}

// waitRecorded waits until the relay has recorded every one of the want
// events delivered: DONE, or with deleteDone deleted (the table holds only
// this run's events, see prepareTables). The relay records them right
// after the Kafka publish returned, so at most moments after the consumer
// saw the record.
func waitRecorded(ctx context.Context, pool *pgxpool.Pool, want int, deleteDone bool) error {
	deadline := time.Now().Add(deliveryLimit)
	for {
		var done, total int
		if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = $1), count(*) FROM `+outboxTable,
			int16(outbox.StatusDone)).Scan(&done, &total); err != nil {
			return fmt.Errorf("count outbox rows: %w", err)
		}
		recorded := done
		if deleteDone {
			recorded = want - total
		}
		if recorded == want {
			if deleteDone {
				fmt.Printf("outbox rows left: %d (%d delivered and deleted)\n", total, want)
			} else {
				fmt.Printf("outbox rows DONE: %d/%d\n", done, want)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d events recorded delivered after %s; outbox: %s",
				recorded, want, deliveryLimit, outboxState(ctx, pool))
		}
		time.Sleep(50 * time.Millisecond)
	}
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
