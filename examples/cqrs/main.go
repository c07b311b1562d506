// Command cqrs runs Watermill's CQRS component on the outbox. PlaceOrder
// commands travel on a CommandBus (Watermill's in-process gochannel); the
// PlaceOrder handler writes the order row and publishes OrderPlaced through
// a cqrs.EventBus in one transaction (store.InTx); the EventBus's publisher
// is the outbox watermilladapter.Publisher, which finds the transaction in
// the context the EventBus passes on. An EventProcessor consumes the events
// through the outbox watermilladapter.Subscriber and "sends a confirmation
// email" for each.
//
// Some commands are invalid (an unknown product): their handler fails after
// the order row and the event were written, the transaction rolls back, and
// no event is ever handled for them. It ends with one line, such as
// "handled 20/20 events, 0 from rolled-back commands", and exits 0 when
// every committed order's event was handled once and none of a rolled-back
// command was.
//
// With no flags it needs no server: the outbox lives in an embedded SQLite
// database in a temporary directory.
//
//	go run ./examples/cqrs
//	go run ./examples/cqrs -database-url postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
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
	"sync"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

const (
	// pgOutboxTable is the outbox table on PostgreSQL: a table of this
	// example's own, so that it never touches another program's events.
	pgOutboxTable = "example_cqrs_outbox"
	pgOrdersTable = "example_cqrs_orders"
	pgStockTable  = "example_cqrs_stock"

	product      = "widget" // the one product in stock
	unknownSKU   = "gizmo"  // what the invalid orders ask for
	initialStock = 1_000_000
	waitLimit    = 30 * time.Second
)

// PlaceOrder is the command.
type PlaceOrder struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// OrderPlaced is the event PlaceOrder publishes when it commits.
type OrderPlaced struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// errInvalidOrder marks a command the business rules reject: its
// transaction rolls back and the command is not retried.
var errInvalidOrder = errors.New("invalid order")

func main() {
	databaseURL := flag.String("database-url", "", "PostgreSQL URL (postgres://…); default: an embedded SQLite database in a temporary directory")
	orders := flag.Int("orders", 20, "how many valid PlaceOrder commands to send")
	invalid := flag.Int("invalid", 5, "how many invalid PlaceOrder commands (unknown product) to send among them")
	flag.Parse()

	// Ctrl-C or a stop ends ctx, and run returns through its deferred
	// clean-up (the temporary directory of the SQLite database included).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *databaseURL, *orders, *invalid); err != nil {
		fmt.Fprintln(os.Stderr, "cqrs:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, databaseURL string, orders, invalid int) error {
	if orders <= 0 {
		return fmt.Errorf("-orders must be positive, got %d", orders)
	}
	if invalid < 0 {
		return fmt.Errorf("-invalid must not be negative, got %d", invalid)
	}
	commands := makeCommands(orders, invalid)
	switch {
	case strings.HasPrefix(databaseURL, "postgres://"), strings.HasPrefix(databaseURL, "postgresql://"):
		return runOnPostgres(ctx, databaseURL, commands)
	case databaseURL == "":
		return runOnSQLite(ctx, commands)
	default:
		return fmt.Errorf("-database-url must be a postgres:// URL (or empty for SQLite), got %q", databaseURL)
	}
}

// makeCommands returns the valid orders with the invalid ones spread evenly
// among them.
func makeCommands(orders, invalid int) []PlaceOrder {
	total := orders + invalid
	cmds := make([]PlaceOrder, total)
	for i := range cmds {
		cmds[i] = PlaceOrder{
			OrderID:  fmt.Sprintf("order-%03d", i+1),
			Customer: fmt.Sprintf("customer-%d@example.com", i%7+1),
			SKU:      product,
			Quantity: i%3 + 1,
		}
		if (i+1)*invalid/total > i*invalid/total {
			cmds[i].SKU = unknownSKU
		}
	}
	return cmds
}

func countInvalid(cmds []PlaceOrder) int {
	n := 0
	for _, c := range cmds {
		if c.SKU != product {
			n++
		}
	}
	return n
}

// shop is the business side of one database: the SQL the PlaceOrder
// handler runs in its transaction, and the counts checked at the end.
type shop[Tx any] struct {
	insertOrder  func(ctx context.Context, tx Tx, cmd *PlaceOrder) error
	reserveStock func(ctx context.Context, tx Tx, sku string, quantity int) (reserved bool, err error)
	countRows    func(ctx context.Context) (orders, events int, err error)
}

func runOnSQLite(ctx context.Context, commands []PlaceOrder) error {
	dir, err := os.MkdirTemp("", "wmoutbox-cqrs-")
	if err != nil {
		return fmt.Errorf("create a temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(ctx, filepath.Join(dir, "shop.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	if err := sqlite.Migrate(ctx, db, sqlite.Config{}); err != nil {
		return fmt.Errorf("create the outbox table: %w", err)
	}
	for _, ddl := range []string{
		`CREATE TABLE orders (id TEXT PRIMARY KEY, customer TEXT NOT NULL, sku TEXT NOT NULL, quantity INTEGER NOT NULL)`,
		`CREATE TABLE stock (sku TEXT PRIMARY KEY, available INTEGER NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("create the shop tables: %w", err)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO stock (sku, available) VALUES (?, ?)`, product, initialStock); err != nil {
		return fmt.Errorf("stock the shop: %w", err)
	}
	store, err := sqlite.NewStore(db, sqlite.Config{})
	if err != nil {
		return err
	}
	fmt.Println("outbox: embedded SQLite in", dir)
	return demo(ctx, store, shop[*sql.Tx]{
		insertOrder: func(ctx context.Context, tx *sql.Tx, cmd *PlaceOrder) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO orders (id, customer, sku, quantity) VALUES (?, ?, ?, ?)`,
				cmd.OrderID, cmd.Customer, cmd.SKU, cmd.Quantity)
			return err
		},
		reserveStock: func(ctx context.Context, tx *sql.Tx, sku string, quantity int) (bool, error) {
			res, err := tx.ExecContext(ctx, `UPDATE stock SET available = available - ? WHERE sku = ? AND available >= ?`, quantity, sku, quantity)
			if err != nil {
				return false, err
			}
			n, err := res.RowsAffected()
			return n == 1, err
		},
		countRows: func(ctx context.Context) (orders, events int, err error) {
			err = db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM outbox_event)`).Scan(&orders, &events)
			return orders, events, err
		},
	}, commands)
}

func runOnPostgres(ctx context.Context, url string, commands []PlaceOrder) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	cfg := postgres.Config{Table: pgOutboxTable}
	if err := postgres.Migrate(ctx, pool, cfg); err != nil {
		return fmt.Errorf("create the outbox table: %w", err)
	}
	// This example's own tables, emptied so that every run starts afresh.
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS ` + pgOrdersTable + ` (id text PRIMARY KEY, customer text NOT NULL, sku text NOT NULL, quantity int NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ` + pgStockTable + ` (sku text PRIMARY KEY, available bigint NOT NULL)`,
		`TRUNCATE ` + pgOrdersTable + `, ` + pgStockTable + `, ` + pgOutboxTable,
		fmt.Sprintf(`INSERT INTO %s (sku, available) VALUES ('%s', %d)`, pgStockTable, product, initialStock),
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("prepare the example's tables: %w", err)
		}
	}
	store, err := postgres.NewStore(pool, cfg)
	if err != nil {
		return err
	}
	fmt.Println("outbox: PostgreSQL, table", pgOutboxTable)
	return demo(ctx, store, shop[pgx.Tx]{
		insertOrder: func(ctx context.Context, tx pgx.Tx, cmd *PlaceOrder) error {
			_, err := tx.Exec(ctx, `INSERT INTO `+pgOrdersTable+` (id, customer, sku, quantity) VALUES ($1, $2, $3, $4)`,
				cmd.OrderID, cmd.Customer, cmd.SKU, cmd.Quantity)
			return err
		},
		reserveStock: func(ctx context.Context, tx pgx.Tx, sku string, quantity int) (bool, error) {
			tag, err := tx.Exec(ctx, `UPDATE `+pgStockTable+` SET available = available - $1 WHERE sku = $2 AND available >= $1`, quantity, sku)
			return tag.RowsAffected() == 1, err
		},
		countRows: func(ctx context.Context) (orders, events int, err error) {
			err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+pgOrdersTable+`), (SELECT count(*) FROM `+pgOutboxTable+`)`).Scan(&orders, &events)
			return orders, events, err
		},
	}, commands)
}

// commandResult is how one PlaceOrder command ended.
type commandResult struct {
	orderID string
	err     error
}

// emails is the "send confirmation email" side: which orders got one, and
// on which outbox path the event came.
type emails struct {
	mu      sync.Mutex
	sent    map[string]int // order id → emails sent
	sources map[string]int // watermilladapter.SourceHot / SourceCold → events
	changed chan struct{}
}

func (e *emails) send(orderID, source string) {
	e.mu.Lock()
	e.sent[orderID]++
	e.sources[source]++
	e.mu.Unlock()
	select {
	case e.changed <- struct{}{}:
	default:
	}
}

// count returns how many of ids got at least one email, and how many
// emails were sent in all to ids.
func (e *emails) count(ids map[string]bool) (distinct, total int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, n := range e.sent {
		if ids[id] {
			distinct++
			total += n
		}
	}
	return distinct, total
}

// demo is the same on every store: the CQRS wiring, the commands, and the
// checks.
func demo[Tx any](ctx context.Context, store *outbox.Store[Tx], db shop[Tx], commands []PlaceOrder) error {
	logger := watermill.NopLogger{}
	marshaler := cqrs.JSONMarshaler{GenerateName: cqrs.StructName}

	// The outbox: a relay (Subscriber) and a Publisher writing in the
	// caller's transaction, handing committed events to the relay at once.
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{PollInterval: 200 * time.Millisecond})
	if err != nil {
		return err
	}
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: sub})
	if err != nil {
		return err
	}
	eventBus, err := cqrs.NewEventBusWithConfig(pub, cqrs.EventBusConfig{
		GeneratePublishTopic: func(p cqrs.GenerateEventPublishTopicParams) (string, error) {
			return "events." + p.EventName, nil
		},
		OnPublish: func(p cqrs.OnEventSendParams) error {
			// Optional: the outbox envelope's business identity.
			if e, ok := p.Event.(*OrderPlaced); ok {
				p.Message.Metadata.Set(watermilladapter.MetadataEventType, p.EventName)
				p.Message.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
				p.Message.Metadata.Set(watermilladapter.MetadataAggregateID, e.OrderID)
			}
			return nil
		},
		Marshaler: marshaler,
		Logger:    logger,
	})
	if err != nil {
		return fmt.Errorf("create the event bus: %w", err)
	}

	// Commands go through Watermill's in-process gochannel: they need no
	// outbox, as the caller learns whether they were handled.
	commandChannel := gochannel.NewGoChannel(gochannel.Config{}, logger)
	commandBus, err := cqrs.NewCommandBusWithConfig(commandChannel, cqrs.CommandBusConfig{
		GeneratePublishTopic: func(p cqrs.CommandBusGeneratePublishTopicParams) (string, error) {
			return "commands." + p.CommandName, nil
		},
		Marshaler: marshaler,
		Logger:    logger,
	})
	if err != nil {
		return fmt.Errorf("create the command bus: %w", err)
	}

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		return err
	}
	router.AddMiddleware(outboxmw.RecordErrors) // handler errors → the outbox's last_error

	results := make(chan commandResult, len(commands))
	commandProcessor, err := cqrs.NewCommandProcessorWithConfig(router, cqrs.CommandProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.CommandProcessorGenerateSubscribeTopicParams) (string, error) {
			return "commands." + p.CommandName, nil
		},
		SubscriberConstructor: func(cqrs.CommandProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return commandChannel, nil
		},
		// Report each command's outcome to the sender and acknowledge it:
		// a rejected command is answered, not retried.
		OnHandle: func(p cqrs.CommandProcessorOnHandleParams) error {
			err := p.Handler.Handle(p.Message.Context(), p.Command)
			results <- commandResult{orderID: p.Command.(*PlaceOrder).OrderID, err: err}
			return nil
		},
		Marshaler: marshaler,
		Logger:    logger,
	})
	if err != nil {
		return fmt.Errorf("create the command processor: %w", err)
	}
	err = commandProcessor.AddHandlers(cqrs.NewCommandHandler("PlaceOrder", func(ctx context.Context, cmd *PlaceOrder) error {
		// One transaction: the order row, its OrderPlaced event, the stock.
		return store.InTx(ctx, func(ctx context.Context, tx Tx) error {
			if err := db.insertOrder(ctx, tx, cmd); err != nil {
				return fmt.Errorf("insert order: %w", err)
			}
			// ctx carries tx: the outbox publisher writes the event in it.
			if err := eventBus.Publish(ctx, &OrderPlaced{OrderID: cmd.OrderID, Customer: cmd.Customer, SKU: cmd.SKU, Quantity: cmd.Quantity}); err != nil {
				return fmt.Errorf("publish OrderPlaced: %w", err)
			}
			reserved, err := db.reserveStock(ctx, tx, cmd.SKU, cmd.Quantity)
			if err != nil {
				return fmt.Errorf("reserve stock: %w", err)
			}
			if !reserved {
				// Returning an error rolls back the order row and the event.
				return fmt.Errorf("%w: unknown product %q", errInvalidOrder, cmd.SKU)
			}
			return nil
		})
	}))
	if err != nil {
		return fmt.Errorf("add the PlaceOrder handler: %w", err)
	}

	sent := &emails{sent: map[string]int{}, sources: map[string]int{}, changed: make(chan struct{}, 1)}
	eventProcessor, err := cqrs.NewEventProcessorWithConfig(router, cqrs.EventProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) {
			return "events." + p.EventName, nil
		},
		// The outbox relay. Every handler subscribing to a topic gets a
		// share of its events, not a copy (no consumer groups): one handler
		// per event type here.
		SubscriberConstructor: func(cqrs.EventProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			return sub, nil
		},
		Marshaler: marshaler,
		Logger:    logger,
	})
	if err != nil {
		return fmt.Errorf("create the event processor: %w", err)
	}
	err = eventProcessor.AddHandlers(cqrs.NewEventHandler("SendConfirmationEmail", func(ctx context.Context, e *OrderPlaced) error {
		source := cqrs.OriginalMessageFromCtx(ctx).Metadata.Get(watermilladapter.MetadataSource)
		sent.send(e.OrderID, source)
		return nil
	}))
	if err != nil {
		return fmt.Errorf("add the SendConfirmationEmail handler: %w", err)
	}

	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(ctx) }()
	defer func() {
		_ = router.Close() // closes the outbox subscriber and the gochannel
		if err := <-routerDone; err != nil {
			fmt.Fprintln(os.Stderr, "router:", err)
		}
	}()
	select {
	case <-router.Running():
	case err := <-routerDone:
		return fmt.Errorf("router stopped: %w", err)
	}

	// A publish outside a transaction is refused, not written on its own.
	if err := eventBus.Publish(ctx, &OrderPlaced{OrderID: "no-tx"}); errors.Is(err, outbox.ErrNoTransaction) {
		fmt.Println("EventBus.Publish outside a transaction: refused (outbox.ErrNoTransaction)")
	} else {
		return fmt.Errorf("a publish outside a transaction should fail with outbox.ErrNoTransaction, got %w", err)
	}

	invalidCount := countInvalid(commands)
	fmt.Printf("sending %d PlaceOrder commands on the command bus (gochannel), %d of them for an unknown product\n", len(commands), invalidCount)
	for _, cmd := range commands {
		if err := commandBus.Send(ctx, &cmd); err != nil {
			return fmt.Errorf("send %s: %w", cmd.OrderID, err)
		}
	}

	committed, rolledBack := map[string]bool{}, map[string]bool{}
	var firstRejection commandResult // the lowest order id rolled back
	deadline := time.After(waitLimit)
	for range commands {
		select {
		case r := <-results:
			switch {
			case r.err == nil:
				committed[r.orderID] = true
			case errors.Is(r.err, errInvalidOrder):
				rolledBack[r.orderID] = true
				if firstRejection.err == nil || r.orderID < firstRejection.orderID {
					firstRejection = r
				}
			default:
				return fmt.Errorf("PlaceOrder %s failed: %w", r.orderID, r.err)
			}
		case <-deadline:
			return fmt.Errorf("waited %s for the commands to be handled: %d committed, %d rolled back of %d",
				waitLimit, len(committed), len(rolledBack), len(commands))
		}
	}
	fmt.Printf("PlaceOrder: %d committed (order row + OrderPlaced in one transaction), %d rolled back\n", len(committed), len(rolledBack))
	if firstRejection.err != nil {
		fmt.Printf("  e.g. %s: %v (the order row and OrderPlaced were already written: both rolled back)\n",
			firstRejection.orderID, firstRejection.err)
	}

	orderRows, eventRows, err := db.countRows(ctx)
	if err != nil {
		return fmt.Errorf("count the rows: %w", err)
	}
	fmt.Printf("tables: %d order rows, %d outbox events", orderRows, eventRows)
	if orderRows == len(committed) && eventRows == len(committed) {
		fmt.Print(" (the committed commands' only: nothing of the rolled-back ones)")
	}
	fmt.Println()

	// Wait for the confirmation emails of the committed orders.
	deadline = time.After(waitLimit)
	for {
		handled, _ := sent.count(committed)
		if handled == len(committed) {
			break
		}
		select {
		case <-sent.changed:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			fmt.Printf("handled %d/%d events\n", handled, len(committed))
			return fmt.Errorf("waited %s for the OrderPlaced events", waitLimit)
		}
	}
	// Give a stray event (there should be none) a moment to show up.
	time.Sleep(300 * time.Millisecond)

	handled, emailsSent := sent.count(committed)
	fromRolledBack, _ := sent.count(rolledBack)
	sent.mu.Lock()
	hot, cold := sent.sources[watermilladapter.SourceHot], sent.sources[watermilladapter.SourceCold]
	sent.mu.Unlock()
	fmt.Printf("SendConfirmationEmail: %d emails for %d orders (%d events on the hot path right after commit, %d from the table)\n",
		emailsSent, handled, hot, cold)
	fmt.Printf("handled %d/%d events, %d from rolled-back commands\n", handled, len(committed), fromRolledBack)

	var problems []string
	if len(committed) != len(commands)-invalidCount || len(rolledBack) != invalidCount {
		problems = append(problems, fmt.Sprintf("expected %d commits and %d rollbacks", len(commands)-invalidCount, invalidCount))
	}
	if orderRows != len(committed) || eventRows != len(committed) {
		problems = append(problems, fmt.Sprintf("expected %d order rows and %d outbox events", len(committed), len(committed)))
	}
	if fromRolledBack != 0 {
		problems = append(problems, "events of rolled-back commands were handled")
	}
	if emailsSent != handled {
		problems = append(problems, fmt.Sprintf("%d events handled more than once", emailsSent-handled))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}
