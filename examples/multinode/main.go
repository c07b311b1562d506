// Command multinode runs three outbox relays against one PostgreSQL table,
// as three service instances would, and shows two things:
//
//  1. The relays share the work. Events written by a writer with no hot path
//     (an outbox.Writer in plain transactions) reach the relays through
//     their cold paths, which claim due rows with FOR UPDATE SKIP LOCKED:
//     each event is delivered by exactly one relay. It prints how many
//     each relay delivered, and the duplicates (deliveries counted per
//     outbox_event_id): 0.
//  2. A crashed relay's claims expire. A fourth "relay" claims a batch with
//     a 2s lease and "crashes" (never records an outcome); the three live
//     relays deliver those events once the lease has ended, not before.
//
// It ends with one line, such as "delivered 3000/3000 events across 3
// relays, 0 duplicates; 50 events of a crashed relay recovered after its 2s
// lease", and exits 0 when every event was delivered exactly once and the
// crashed relay's events only after its lease.
//
// It needs PostgreSQL and uses a table of its own, example_multinode_outbox,
// emptied at start:
//
//	go run ./examples/multinode
//	go run ./examples/multinode -database-url postgres://user:pass@host:5432/db -events 10000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

const (
	table        = "example_multinode_outbox" // this example's own outbox table
	topic        = "orders"
	relayCount   = 3
	crashedOwner = "relay-4"
	lease        = 2 * time.Second        // every relay's LockTimeout
	pollInterval = 100 * time.Millisecond // the live relays' cold-path poll
	eventsPerTx  = 10                     // events per business transaction
	waitLimit    = 60 * time.Second
)

func main() {
	databaseURL := flag.String("database-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL URL")
	events := flag.Int("events", 3000, "how many events to write for the three relays")
	crashed := flag.Int("crashed", 50, "how many events the crashing relay claims (at most 10000)")
	flag.Parse()

	if err := run(context.Background(), *databaseURL, *events, *crashed); err != nil {
		fmt.Fprintln(os.Stderr, "multinode:", err)
		os.Exit(1)
	}
}

// delivery is one handler call on one relay.
type delivery struct {
	eventID string
	relay   string
	at      time.Time
}

// deliveries records every handler call of every relay.
type deliveries struct {
	mu  sync.Mutex
	all []delivery
}

func (d *deliveries) record(relay string, msg *message.Message) {
	d.mu.Lock()
	d.all = append(d.all, delivery{eventID: msg.Metadata.Get(watermilladapter.MetadataEventID), relay: relay, at: time.Now()})
	d.mu.Unlock()
}

// of returns the deliveries of the events in ids.
func (d *deliveries) of(ids map[string]bool) []delivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []delivery
	for _, dl := range d.all {
		if ids[dl.eventID] {
			out = append(out, dl)
		}
	}
	return out
}

// distinct counts the different events among ds.
func distinct(ds []delivery) int {
	seen := make(map[string]bool, len(ds))
	for _, d := range ds {
		seen[d.eventID] = true
	}
	return len(seen)
}

// perRelay counts ds by relay, as "relay-1 1004, relay-2 998, relay-3 998".
func perRelay(ds []delivery) string {
	counts := map[string]int{}
	for _, d := range ds {
		counts[d.relay]++
	}
	parts := make([]string, 0, relayCount)
	for i := range relayCount {
		name := relayName(i)
		parts = append(parts, fmt.Sprintf("%s %d", name, counts[name]))
	}
	return strings.Join(parts, ", ")
}

func relayName(i int) string { return fmt.Sprintf("relay-%d", i+1) }

// relay is one instance: its own pool, store, subscriber and router.
type relay struct {
	pool   *pgxpool.Pool
	router *message.Router
	done   chan error
}

func startRelay(ctx context.Context, url string, cfg postgres.Config, name string, got *deliveries) (*relay, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("%s: connect: %w", name, err)
	}
	r := &relay{pool: pool, done: make(chan error, 1)}
	store, err := postgres.NewStore(pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		Owner:        name,
		PollInterval: pollInterval,
		LockTimeout:  lease,
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	r.router, err = message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		pool.Close()
		return nil, err
	}
	r.router.AddMiddleware(outboxmw.RecordErrors)
	r.router.AddConsumerHandler("count-"+topic, topic, sub, func(msg *message.Message) error {
		got.record(name, msg)
		return nil
	})
	go func() { r.done <- r.router.Run(ctx) }()
	select {
	case <-r.router.Running():
		return r, nil
	case err := <-r.done:
		pool.Close()
		return nil, fmt.Errorf("%s: router stopped: %w", name, err)
	}
}

// stop closes the router (and so the subscriber, which releases unfinished
// claims), then the pool.
func (r *relay) stop() error {
	err := r.router.Close()
	if runErr := <-r.done; err == nil {
		err = runErr
	}
	r.pool.Close()
	return err
}

func run(ctx context.Context, url string, events, crashed int) (err error) {
	if events <= 0 {
		return fmt.Errorf("-events must be positive, got %d", events)
	}
	if crashed <= 0 || crashed > 10000 {
		return fmt.Errorf("-crashed must be between 1 and 10000, got %d", crashed)
	}
	if !strings.HasPrefix(url, "postgres://") && !strings.HasPrefix(url, "postgresql://") {
		return fmt.Errorf("-database-url must be a postgres:// URL, got %q", url)
	}

	// The writer's pool: migrations, the business transactions, checks.
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	cfg := postgres.Config{Table: table}
	if err := postgres.Migrate(ctx, pool, cfg); err != nil {
		return fmt.Errorf("create the outbox table: %w", err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM `+table); err != nil {
		return fmt.Errorf("empty the outbox table: %w", err)
	}
	store, err := postgres.NewStore(pool, cfg)
	if err != nil {
		return err
	}
	// No AfterCommit hook: no hot path, every event waits in the table for
	// the relays' cold paths.
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		return err
	}
	fmt.Printf("outbox: PostgreSQL, table %s (emptied)\n", table)

	got := &deliveries{}
	relays := make([]*relay, 0, relayCount)
	defer func() {
		for _, r := range relays {
			if stopErr := r.stop(); stopErr != nil && err == nil {
				err = fmt.Errorf("stop a relay: %w", stopErr)
			}
		}
	}()
	for i := range relayCount {
		r, err := startRelay(ctx, url, cfg, relayName(i), got)
		if err != nil {
			return err
		}
		relays = append(relays, r)
	}
	fmt.Printf("%d relays running, each with its own connection pool (owners relay-1..relay-%d, poll %s, lease %s)\n",
		relayCount, relayCount, pollInterval, lease)

	// Part 1: the relays share the work.
	start := time.Now()
	written, err := writeEvents(ctx, pool, writer, events, "order")
	if err != nil {
		return err
	}
	fmt.Printf("wrote %d events in %d plain transactions (no hot path) in %s\n",
		events, (events+eventsPerTx-1)/eventsPerTx, time.Since(start).Round(time.Millisecond))
	if err := waitUntil(func() bool { return distinct(got.of(written)) == len(written) }); err != nil {
		return fmt.Errorf("delivered %d/%d events: %w", distinct(got.of(written)), len(written), err)
	}
	firstPart := got.of(written)
	fmt.Printf("all %d delivered %s after the first write: %s\n",
		len(written), time.Since(start).Round(time.Millisecond), perRelay(firstPart))

	// Part 2: a relay claims a batch and crashes. The claim is made in the
	// transaction that writes the events, so that the live relays, polling
	// every 100ms, cannot take them first: they become visible already
	// claimed by relay-4.
	crashedIDs, claimedAt, err := writeAndClaim(ctx, pool, cfg, writer, crashed)
	if err != nil {
		return err
	}
	fmt.Printf("%s claims %d new events (lease %s) and crashes: it never records an outcome\n", crashedOwner, len(crashedIDs), lease)

	// Half-way through the lease: nothing delivered, still claimed.
	time.Sleep(time.Until(claimedAt.Add(lease / 2)))
	var stillClaimed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE locked_by = $1 AND status = 0`, crashedOwner).Scan(&stillClaimed); err != nil {
		return fmt.Errorf("read the claims: %w", err)
	}
	fmt.Printf("after %s: %d of them delivered, %d still claimed by %s\n",
		lease/2, distinct(got.of(crashedIDs)), stillClaimed, crashedOwner)

	if err := waitUntil(func() bool { return distinct(got.of(crashedIDs)) == len(crashedIDs) }); err != nil {
		return fmt.Errorf("recovered %d/%d events of the crashed relay: %w", distinct(got.of(crashedIDs)), len(crashedIDs), err)
	}
	recovered := got.of(crashedIDs)
	firstAt, lastAt := recovered[0].at, recovered[0].at
	for _, d := range recovered {
		firstAt, lastAt = minTime(firstAt, d.at), maxTime(lastAt, d.at)
	}
	fmt.Printf("recovered by the live relays %s after the claim (first delivery at %s): %s\n",
		lastAt.Sub(claimedAt).Round(time.Millisecond), firstAt.Sub(claimedAt).Round(time.Millisecond), perRelay(recovered))

	// Wait for the outcomes (recorded in batches) and stop the relays, so
	// that no delivery is still on its way when duplicates are counted.
	all := make(map[string]bool, len(written)+len(crashedIDs))
	for id := range written {
		all[id] = true
	}
	for id := range crashedIDs {
		all[id] = true
	}
	var done int
	if err := waitUntil(func() bool {
		err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE status = 1`).Scan(&done)
		return err == nil && done == len(all)
	}); err != nil {
		return fmt.Errorf("%d/%d events DONE in the table: %w", done, len(all), err)
	}
	for _, r := range relays {
		if err := r.stop(); err != nil {
			return fmt.Errorf("stop a relay: %w", err)
		}
	}
	relays = nil

	everything := got.of(all)
	duplicates := len(everything) - distinct(everything)
	fmt.Printf("table: %d/%d events DONE; %d deliveries of %d events\n", done, len(all), len(everything), distinct(everything))
	fmt.Printf("delivered %d/%d events across %d relays, %d duplicates; %d events of a crashed relay recovered after its %s lease\n",
		distinct(firstPart), len(written), relayCount, duplicates, distinct(recovered), lease)

	var problems []string
	if duplicates != 0 {
		problems = append(problems, fmt.Sprintf("%d duplicate deliveries", duplicates))
	}
	if early := firstAt.Sub(claimedAt); early < lease {
		problems = append(problems, fmt.Sprintf("a claimed event was delivered %s after the claim, before the lease ended", early.Round(time.Millisecond)))
	}
	if stillClaimed != len(crashedIDs) {
		problems = append(problems, fmt.Sprintf("only %d/%d events were still claimed half-way through the lease", stillClaimed, len(crashedIDs)))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// writeEvents writes n OrderPlaced events on topic, eventsPerTx per
// transaction, and returns their ids.
func writeEvents(ctx context.Context, pool *pgxpool.Pool, writer *outbox.Writer[pgx.Tx], n int, prefix string) (map[string]bool, error) {
	ids := make(map[string]bool, n)
	for first := 0; first < n; first += eventsPerTx {
		batch := newEvents(first, min(eventsPerTx, n-first), prefix)
		var written []string
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// ... the business writes of the transaction would go here ...
			var err error
			written, err = writer.Write(ctx, tx, batch...)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("write events %d-%d: %w", first+1, first+len(batch), err)
		}
		for _, id := range written {
			ids[id] = true
		}
	}
	return ids, nil
}

func newEvents(first, n int, prefix string) []outbox.Envelope {
	events := make([]outbox.Envelope, n)
	for i := range events {
		orderID := fmt.Sprintf("%s-%05d", prefix, first+i+1)
		e := outbox.NewJSON("OrderPlaced", fmt.Appendf(nil, `{"orderId":%q}`, orderID))
		e.Topic, e.AggregateType, e.AggregateID = topic, "Order", orderID
		events[i] = e
	}
	return events
}

// writeAndClaim writes n events and claims them for the crashing relay in
// the same transaction, with the claim a relay makes (the driver's Claim,
// on a store whose database is the transaction), and returns their ids and
// the time of the claim.
func writeAndClaim(ctx context.Context, pool *pgxpool.Pool, cfg postgres.Config, writer *outbox.Writer[pgx.Tx], n int) (map[string]bool, time.Time, error) {
	ids := make(map[string]bool, n)
	var claimedAt time.Time
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := writer.Write(ctx, tx, newEvents(0, n, "crash")...); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		crashing, err := postgres.NewStore(tx, cfg)
		if err != nil {
			return err
		}
		claimedAt = time.Now()
		claimed, err := crashing.Driver().Claim(ctx, &outboxdriver.ClaimParams{Owner: crashedOwner, Topic: topic,
			Now: claimedAt, CreatedBefore: claimedAt, LockedUntil: claimedAt.Add(lease), Limit: n})
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		for _, e := range claimed {
			ids[e.ID] = true
		}
		if len(claimed) != n {
			return fmt.Errorf("claimed %d of the %d events written", len(claimed), n)
		}
		return nil
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%s: %w", crashedOwner, err)
	}
	return ids, claimedAt, nil
}

// waitUntil polls cond until it holds or waitLimit has passed.
func waitUntil(cond func() bool) error {
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after %s", waitLimit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
