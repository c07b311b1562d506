//go:build faults

package faults

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// The ordered relays' configuration, shared by this process's relays and
// the child relay processes (runRelayProcess with envScenario set to
// scenarioOrdered).
const (
	scenarioOrdered = "ordered"
	orderedTopic    = "ordered"
	// orderedRelaysOrdered is every relay's SubscriberConfig.Ordered.
	// Set to false, the scenario must report order violations: that is
	// how the check was shown to fail; so it does with a relay that goes
	// on with a run after a Nack (README.md has the figures).
	orderedRelaysOrdered = true

	// Few aggregates, each with a backlog: the relays deliver them in runs
	// (SubscriberConfig.OrderedRunLength, here up to the cold queue).
	orderedAggregates   = 10
	orderedInProcess    = 3 // relays in this process; one more runs as a child process at any time
	orderedWriters      = 4 // three through the in-process relays' publishers, one through an outbox.Writer
	orderedKills        = 5 // child relays killed with SIGKILL mid-run
	orderedTarget       = 4000
	orderedWorkers      = 4
	orderedColdQueue    = 40
	orderedBatch        = 20
	orderedPollInterval = 50 * time.Millisecond
	orderedLockTimeout  = 2 * time.Second

	// Of the events, these percentages fail their first delivery: with a
	// plain error (RETRY, an attempt spent), or with outbox.RetryAfter (a
	// deferral, no attempt spent).
	orderedRetryPercent = 10
	orderedDeferPercent = 5
	orderedRetryAfter   = 150 * time.Millisecond

	orderedAggregateType = "FaultAggregate"
	// headerSeq carries an event's number within its aggregate, from 0.
	headerSeq = "fault_seq"
)

// orderedRetry spends the injected failures' retries quickly; only first
// deliveries fail, so no event goes DEAD.
var orderedRetry = outbox.Backoff{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond, MaxAttempts: 10}

var errOrderedFault = errors.New("ordered: first delivery fails on purpose")

func orderedSubscriberConfig(owner string) watermilladapter.SubscriberConfig {
	return watermilladapter.SubscriberConfig{
		Owner:             owner,
		Ordered:           orderedRelaysOrdered,
		WorkerCount:       orderedWorkers,
		ColdQueueCapacity: orderedColdQueue,
		BatchSize:         orderedBatch,
		PollInterval:      orderedPollInterval,
		LockTimeout:       orderedLockTimeout,
		RetryPolicy:       orderedRetry,
	}
}

// fault_order_written maps each committed event to its aggregate and
// number (written in the event's transaction, as fault_written is);
// fault_order_failed holds the events whose first delivery failed, so
// that the failure happens once whichever relay delivers; fault_order_
// delivery has a row per delivery by a child relay, written when its
// handler starts and completed when it returns.
const orderedSchema = `
CREATE TABLE fault_order_written (event_id text PRIMARY KEY, aggregate text NOT NULL, seq int NOT NULL,
    UNIQUE (aggregate, seq));
CREATE TABLE fault_order_failed (event_id text PRIMARY KEY);
CREATE TABLE fault_order_delivery (id bigserial PRIMARY KEY, event_id text NOT NULL, aggregate text NOT NULL,
    seq int NOT NULL, by_relay text NOT NULL, attempt int NOT NULL, started bigint NOT NULL, ended bigint,
    outcome text NOT NULL DEFAULT '', source text NOT NULL);`

// TestOrderedRelays runs ordered relays under faults: three in this
// process (own pools and subscribers) and one child process at a time,
// killed with SIGKILL five times mid-run and started again under a new
// name; the last one runs to the end and stops gracefully. Four writers
// write events of 10 aggregates, each aggregate's in turn, numbered; a
// tenth of the events fail their first delivery (RETRY), a twentieth
// defer it (RetryAfter). Besides the ledger's figures, the deliveries'
// times are checked: the first delivery of each event starts after an
// Ack of the one before it in its aggregate, and no two events of an
// aggregate are in handlers at the same time, unless the earlier one was
// acked by another delivery before the later one started (the other is
// then a redelivery of an event already handled, after a lease ran out).
func TestOrderedRelays(t *testing.T) {
	t.Parallel()
	began := time.Now()
	url := testdb.URL(t)
	pool := openPool(t, url, 6)
	l := newLedger(t, pool, "ordered-relays")
	_, err := pool.Exec(t.Context(), orderedSchema)
	require.NoError(t, err)

	mem := &memOrderLog{l: l}
	var relays []*relaytest.Relay
	for i := range orderedInProcess {
		owner := fmt.Sprintf("ordered-relay-%d", i)
		relays = append(relays, relaytest.Start(t, openPool(t, url, 4), orderedSubscriberConfig(owner),
			relaytest.Handlers{orderedTopic: orderedHandler(pool, owner, mem)}))
	}

	// Each writer owns the aggregates a with a % orderedWriters equal to
	// its number, so that an aggregate's events are written in turn.
	var ws []*writers
	for w := range orderedWriters {
		var aggregates []string
		for a := w; a < orderedAggregates; a += orderedWriters {
			aggregates = append(aggregates, fmt.Sprintf("agg-%02d", a))
		}
		var store *postgres.Store
		var put putFunc
		if w < len(relays) {
			store, put = relays[w].Store, putWithPublisher(relays[w].Pub)
		} else {
			// No announcement: the relays' polls find these.
			store, err = postgres.NewStore(openPool(t, url, 2), postgres.Config{})
			require.NoError(t, err)
			writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
			require.NoError(t, err)
			put = putWithWriter(writer)
		}
		ws = append(ws, startWriters(t, l, writerConfig{
			writers: 1, batch: 5, randomBatch: true, pause: 10 * time.Millisecond, rollbackEvery: 10,
			write: writeOrdered(store, aggregates, put),
		}))
	}
	written := func() int64 {
		var n int64
		for _, w := range ws {
			n += w.events.Load()
		}
		return n
	}

	child := envScenario + "=" + scenarioOrdered
	killedAt := map[string]int64{}
	var inFlight []int64
	for kill := 1; kill <= orderedKills; kill++ {
		owner := fmt.Sprintf("ordered-victim-%d", kill)
		victim := startRelayProcess(t, url, owner, child)
		target := 1 + rand.IntN(100)
		// Mid-run: after a random number of deliveries, while it holds
		// claims.
		waitFor(t, owner+" delivering", 30*time.Second, func() (bool, string) {
			var n, holds int
			if err := pool.QueryRow(t.Context(), `
SELECT (SELECT count(*) FROM fault_delivered WHERE by_relay = $1),
       (SELECT count(*) FROM outbox_event WHERE locked_by = $1 AND status IN (0, 2))`, owner).Scan(&n, &holds); err != nil {
				return false, err.Error()
			}
			return n >= target && holds > 0, fmt.Sprintf("%d of %d deliveries, %d claims held; %d written; %s",
				n, target, holds, written(), victim.output())
		})
		victim.kill(t)
		killedAt[owner] = time.Now().UnixNano()
		var held int64
		require.NoError(t, pool.QueryRow(t.Context(),
			`SELECT count(*) FROM outbox_event WHERE locked_by = $1 AND status IN (0, 2)`, owner).Scan(&held))
		inFlight = append(inFlight, held)
	}
	last := startRelayProcess(t, url, "ordered-child-last", child)
	waitFor(t, fmt.Sprintf("%d events written", orderedTarget), 60*time.Second, func() (bool, string) {
		return written() >= orderedTarget, fmt.Sprintf("%d written", written())
	})
	for _, w := range ws {
		w.stop()
	}
	f := l.waitDelivered(t, 60*time.Second)
	last.stop(t)

	st, err := outboxState(t.Context(), pool)
	require.NoError(t, err)
	events, err := loadOrderWritten(t.Context(), pool)
	require.NoError(t, err)
	deliveries, err := loadOrderDeliveries(t.Context(), pool)
	require.NoError(t, err)
	deliveries = append(deliveries, mem.all()...)
	o := checkOrder(events, deliveries, killedAt)

	var bound int64
	for i, held := range inFlight {
		require.LessOrEqual(t, held, int64(orderedWorkers+orderedColdQueue+settlerBacklog),
			"kill %d: a relay never holds more than workers + cold queue + settler backlog", i+1)
		bound += held
	}
	l.report(t, f, 1, orderedKills, fmt.Sprintf("relays=%d aggregates=%d ordered=%t in_flight_at_kills=%d",
		orderedInProcess+1, orderedAggregates, orderedRelaysOrdered, bound), o.String(),
		fmt.Sprintf("seconds=%.1f", time.Since(began).Seconds()))

	requireRecoveredFromKills(t, f, st, bound, inFlight)
	require.Equal(t, f.events, int64(len(events)), "every committed event numbered")

	require.Positive(t, o.retries, "first deliveries failed with an error")
	require.Positive(t, o.deferrals, "first deliveries deferred with RetryAfter")
	require.Zero(t, o.unknown+o.mismatched, "deliveries of unknown events, or with the wrong aggregate or number: %s", o)
	require.Zero(t, o.violations, "first deliveries before the previous event of their aggregate was acked: %s", o)
	require.Zero(t, o.concurrent, "events of one aggregate in handlers at the same time: %s", o)
	pipelined, err := pipelinedDeliveries(t.Context(), pool, events, deliveries)
	require.NoError(t, err)
	t.Logf("pipelined=%d (first deliveries that started before the DONE of the event before them was recorded)", pipelined)
	require.Positive(t, pipelined, "the relays delivered runs: an event handed over before its predecessor's DONE was written")
}

// pipelinedDeliveries counts the events whose first delivery started
// before the DONE of the event before them in their aggregate was
// recorded (done_at): only a run delivers so, since a claim takes an
// aggregate's next event once that DONE is written.
func pipelinedDeliveries(ctx context.Context, db *pgxpool.Pool, events map[string]orderedEvent, deliveries []orderDelivery) (int, error) {
	rows, err := db.Query(ctx, `SELECT event_id, (extract(epoch FROM done_at) * 1e9)::bigint FROM outbox_event WHERE done_at IS NOT NULL`)
	if err != nil {
		return 0, err
	}
	type key struct {
		aggregate string
		seq       int
	}
	doneAt := make(map[key]int64)
	var id string
	var at int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &at}, func() error {
		if e, ok := events[id]; ok {
			doneAt[key{e.aggregate, e.seq}] = at
		}
		return nil
	}); err != nil {
		return 0, err
	}
	first := make(map[string]int64)
	for _, d := range deliveries {
		if at, ok := first[d.id]; !ok || d.started < at {
			first[d.id] = d.started
		}
	}
	n := 0
	for id, started := range first {
		e, ok := events[id]
		if !ok || e.seq == 0 {
			continue
		}
		if done, ok := doneAt[key{e.aggregate, e.seq - 1}]; ok && started < done {
			n++
		}
	}
	return n, nil
}

// orderedEvent is an event of the scenario: its id, aggregate and number
// in the aggregate.
type orderedEvent struct {
	id, aggregate string
	seq           int
}

// putFunc writes events in tx, one way or another.
type putFunc func(ctx context.Context, tx pgx.Tx, events []orderedEvent) error

// putWithPublisher publishes through a relay's Watermill publisher: its
// commit wakes the relay's claims.
func putWithPublisher(pub *watermilladapter.Publisher[pgx.Tx]) putFunc {
	return func(ctx context.Context, _ pgx.Tx, events []orderedEvent) error {
		msgs := make([]*message.Message, len(events))
		for i, e := range events {
			msgs[i] = message.NewMessage(watermill.NewUUID(), payloadFor(e.id))
			msgs[i].Metadata.Set(watermilladapter.MetadataEventID, e.id)
			msgs[i].Metadata.Set(watermilladapter.MetadataEventType, string(faultTested))
			msgs[i].Metadata.Set(watermilladapter.MetadataAggregateType, orderedAggregateType)
			msgs[i].Metadata.Set(watermilladapter.MetadataAggregateID, e.aggregate)
			msgs[i].Metadata.Set(headerSeq, strconv.Itoa(e.seq))
			msgs[i].SetContext(ctx)
		}
		return pub.Publish(orderedTopic, msgs...)
	}
}

// putWithWriter writes through an outbox.Writer: nothing announces the
// commit.
func putWithWriter(w *outbox.Writer[pgx.Tx]) putFunc {
	return func(ctx context.Context, tx pgx.Tx, events []orderedEvent) error {
		envs := make([]outbox.Envelope, len(events))
		for i, e := range events {
			envs[i] = outbox.Envelope{ID: e.id, Type: faultTested, Topic: orderedTopic,
				AggregateType: orderedAggregateType, AggregateID: e.aggregate,
				Headers: map[string]string{headerSeq: strconv.Itoa(e.seq)}, PayloadJSON: payloadFor(e.id)}
		}
		_, err := w.Write(ctx, tx, envs...)
		return err
	}
}

// writeOrdered writes each event for one of aggregates, at random, with
// the aggregate's next number; a transaction may hold several events of
// one aggregate. The numbers count only once the transaction commits. It
// must not be called concurrently (one writer goroutine).
func writeOrdered(store *postgres.Store, aggregates []string, put putFunc) writeFunc {
	next := make(map[string]int)
	return func(ctx context.Context, ids []string, rollback bool) error {
		events := make([]orderedEvent, len(ids))
		taken := make(map[string]int)
		aggs, seqs := make([]string, len(ids)), make([]int32, len(ids))
		for i, id := range ids {
			a := aggregates[rand.IntN(len(aggregates))]
			events[i] = orderedEvent{id: id, aggregate: a, seq: next[a] + taken[a]}
			taken[a]++
			aggs[i], seqs[i] = a, int32(events[i].seq)
		}
		err := store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if err := put(ctx, tx, events); err != nil {
				return err
			}
			if err := recordWritten(ctx, tx, ids); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO fault_order_written (event_id, aggregate, seq)
SELECT * FROM unnest($1::text[], $2::text[], $3::int[])`, ids, aggs, seqs); err != nil {
				return err
			}
			if rollback {
				return errRollback
			}
			return nil
		})
		if err == nil {
			for a, n := range taken {
				next[a] += n
			}
		}
		return err
	}
}

// orderDelivery is one handler call: when it started and ended (Unix
// nanoseconds, one clock for every process of the host; ended is 0 while
// unknown) and how it ended.
type orderDelivery struct {
	row            int64 // fault_order_delivery id, for a child relay's
	id, aggregate  string
	seq            int
	by             string
	attempt        int
	started, ended int64
	outcome        string // "ack", "retry", "defer", or "error" (the handler's own failure)
	source         string // the message's outbox_source
}

// orderLog records deliveries: begin as the handler starts, end as it
// returns (and, for an Ack, in the ledger).
type orderLog interface {
	begin(ctx context.Context, d *orderDelivery) error
	end(ctx context.Context, d *orderDelivery) error
}

// memOrderLog keeps this process's deliveries in memory: its relays are
// never killed, so a delivery is recorded whole when it ends.
type memOrderLog struct {
	l  *ledger
	mu sync.Mutex
	ds []orderDelivery
}

func (m *memOrderLog) begin(context.Context, *orderDelivery) error { return nil }

func (m *memOrderLog) end(_ context.Context, d *orderDelivery) error {
	m.mu.Lock()
	m.ds = append(m.ds, *d)
	m.mu.Unlock()
	if d.outcome == "ack" {
		m.l.deliver(d.id, d.by)
	}
	return nil
}

func (m *memOrderLog) all() []orderDelivery {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.ds)
}

// dbOrderLog records a child relay's deliveries in PostgreSQL as they
// start, so that those a kill interrupts are known.
type dbOrderLog struct{ pool *pgxpool.Pool }

func (b dbOrderLog) begin(ctx context.Context, d *orderDelivery) error {
	return b.pool.QueryRow(ctx, `
INSERT INTO fault_order_delivery (event_id, aggregate, seq, by_relay, attempt, started, source)
VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`, d.id, d.aggregate, d.seq, d.by, d.attempt, d.started, d.source).Scan(&d.row)
}

func (b dbOrderLog) end(ctx context.Context, d *orderDelivery) error {
	if d.outcome == "ack" {
		_, err := b.pool.Exec(ctx, `
WITH ended AS (UPDATE fault_order_delivery SET ended = $2, outcome = $3 WHERE id = $1)
INSERT INTO fault_delivered (event_id, by_relay) VALUES ($4, $5)`, d.row, d.ended, d.outcome, d.id, d.by)
		return err
	}
	_, err := b.pool.Exec(ctx, `UPDATE fault_order_delivery SET ended = $2, outcome = $3 WHERE id = $1`, d.row, d.ended, d.outcome)
	return err
}

// Faults a handler injects into an event's first delivery.
const (
	faultNone = iota
	faultRetry
	faultDefer
)

// faultFor picks an event's fault from its id, the same in every relay.
func faultFor(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	switch n := h.Sum32() % 100; {
	case n < orderedRetryPercent:
		return faultRetry
	case n < orderedRetryPercent+orderedDeferPercent:
		return faultDefer
	default:
		return faultNone
	}
}

// orderedHandler records each delivery in log, spends a moment (up to
// 2 ms, so that deliveries that should not overlap would), and fails the
// first delivery of the events faultFor picks; db decides which delivery
// is the first, across relays.
func orderedHandler(db *pgxpool.Pool, by string, log orderLog) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		d := orderDelivery{
			started:   time.Now().UnixNano(),
			id:        msg.Metadata.Get(watermilladapter.MetadataEventID),
			aggregate: msg.Metadata.Get(watermilladapter.MetadataAggregateID),
			by:        by,
			source:    msg.Metadata.Get(watermilladapter.MetadataSource),
		}
		var err error
		if d.seq, err = strconv.Atoi(msg.Metadata.Get(headerSeq)); err != nil {
			return fmt.Errorf("event %s: header %s: %w", d.id, headerSeq, err)
		}
		d.attempt, _ = strconv.Atoi(msg.Metadata.Get(watermilladapter.MetadataAttempt))
		ctx := msg.Context()
		if err := log.begin(ctx, &d); err != nil {
			return err
		}
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		var fault error
		d.outcome = "ack"
		if kind := faultFor(d.id); kind != faultNone {
			tag, err := db.Exec(ctx, `INSERT INTO fault_order_failed (event_id) VALUES ($1) ON CONFLICT DO NOTHING`, d.id)
			switch {
			case err != nil:
				fault, d.outcome = err, "error"
			case tag.RowsAffected() == 0: // failed once already
			case kind == faultRetry:
				fault, d.outcome = errOrderedFault, "retry"
			default:
				fault, d.outcome = outbox.RetryAfter(orderedRetryAfter, errOrderedFault), "defer"
			}
		}
		d.ended = time.Now().UnixNano()
		if err := log.end(ctx, &d); err != nil {
			return err
		}
		return fault
	}
}

func loadOrderWritten(ctx context.Context, db *pgxpool.Pool) (map[string]orderedEvent, error) {
	rows, err := db.Query(ctx, `SELECT event_id, aggregate, seq FROM fault_order_written`)
	if err != nil {
		return nil, err
	}
	events := make(map[string]orderedEvent)
	var e orderedEvent
	_, err = pgx.ForEachRow(rows, []any{&e.id, &e.aggregate, &e.seq}, func() error {
		events[e.id] = e
		return nil
	})
	return events, err
}

func loadOrderDeliveries(ctx context.Context, db *pgxpool.Pool) ([]orderDelivery, error) {
	rows, err := db.Query(ctx, `
SELECT id, event_id, aggregate, seq, by_relay, attempt, started, coalesce(ended, 0), outcome FROM fault_order_delivery`)
	if err != nil {
		return nil, err
	}
	var ds []orderDelivery
	var d orderDelivery
	_, err = pgx.ForEachRow(rows, []any{&d.row, &d.id, &d.aggregate, &d.seq, &d.by, &d.attempt, &d.started, &d.ended, &d.outcome},
		func() error {
			ds = append(ds, d)
			return nil
		})
	return ds, err
}

// orderFigures are what checkOrder counts.
type orderFigures struct {
	deliveries int
	retries    int // first deliveries failed with an error
	deferrals  int // first deliveries failed with RetryAfter
	unknown    int // deliveries of events not in fault_order_written
	mismatched int // deliveries whose aggregate or number differs from the written one
	// violations: events whose first delivery started before an Ack of
	// the previous event of their aggregate (or with none).
	violations int
	// concurrent: pairs of deliveries of two events of one aggregate in
	// handlers at the same time; excused: such pairs where the earlier
	// event had been acked by another delivery before the later one
	// started (a redelivery of an event handled already).
	concurrent, excused int
	// sameEvent: pairs of deliveries of one event at the same time (a
	// lease that ran out while a handler held the event).
	sameEvent int
}

func (o orderFigures) String() string {
	return fmt.Sprintf("handler_calls=%d retries=%d deferrals=%d order_violations=%d concurrent=%d concurrent_excused=%d same_event_overlaps=%d unknown=%d mismatched=%d",
		o.deliveries, o.retries, o.deferrals, o.violations, o.concurrent, o.excused, o.sameEvent, o.unknown, o.mismatched)
}

// checkOrder checks the deliveries of each aggregate against the written
// events. A delivery that never ended (its relay was killed) ends at the
// kill; one whose end is unknown otherwise, never.
func checkOrder(events map[string]orderedEvent, deliveries []orderDelivery, killedAt map[string]int64) orderFigures {
	o := orderFigures{deliveries: len(deliveries)}
	count := make(map[string]int) // events written per aggregate
	for _, e := range events {
		count[e.aggregate]++
	}
	byAggregate := make(map[string][]orderDelivery)
	for _, d := range deliveries {
		e, ok := events[d.id]
		if !ok {
			o.unknown++
			continue
		}
		if e.aggregate != d.aggregate || e.seq != d.seq {
			o.mismatched++
			d.aggregate, d.seq = e.aggregate, e.seq
		}
		if d.ended == 0 {
			if at, ok := killedAt[d.by]; ok {
				d.ended = at
			} else {
				d.ended = math.MaxInt64
			}
		}
		switch d.outcome {
		case "retry":
			o.retries++
		case "defer":
			o.deferrals++
		}
		byAggregate[d.aggregate] = append(byAggregate[d.aggregate], d)
	}
	for aggregate, ds := range byAggregate {
		slices.SortFunc(ds, func(a, b orderDelivery) int { return cmp.Compare(a.started, b.started) })
		firstStart := make(map[int]int64)
		acks := make(map[int][]int) // by number, the indexes in ds of the deliveries acked
		for i, d := range ds {
			if _, ok := firstStart[d.seq]; !ok {
				firstStart[d.seq] = d.started // ds is sorted by start
			}
			if d.outcome == "ack" {
				acks[d.seq] = append(acks[d.seq], i)
			}
		}
		// ackedBefore reports whether event seq was acked before at by a
		// delivery other than ds[except].
		ackedBefore := func(seq int, at int64, except int) bool {
			for _, i := range acks[seq] {
				if i != except && ds[i].ended < at {
					return true
				}
			}
			return false
		}
		for k := 1; k < count[aggregate]; k++ {
			if start, ok := firstStart[k]; ok && !ackedBefore(k-1, start, -1) {
				o.violations++
			}
		}
		for i := range ds {
			for j := i + 1; j < len(ds) && ds[j].started < ds[i].ended; j++ {
				a, b := i, j
				if ds[a].seq == ds[b].seq {
					o.sameEvent++
					continue
				}
				if ds[b].seq < ds[a].seq {
					a, b = b, a
				}
				if ackedBefore(ds[a].seq, ds[b].started, a) {
					o.excused++
				} else {
					o.concurrent++
				}
			}
		}
	}
	return o
}

// TestCheckOrder checks the order check on made-up deliveries of one
// aggregate's events e0, e1 (times in nanoseconds).
func TestCheckOrder(t *testing.T) {
	t.Parallel()
	events := map[string]orderedEvent{"e0": {"e0", "a", 0}, "e1": {"e1", "a", 1}}
	d := func(id, by string, started, ended int64, outcome string) orderDelivery {
		return orderDelivery{id: id, aggregate: "a", seq: events[id].seq, by: by, started: started, ended: ended, outcome: outcome}
	}
	for _, c := range []struct {
		name       string
		ds         []orderDelivery
		killedAt   map[string]int64
		violations int
		concurrent int
		excused    int
	}{
		{name: "in order", ds: []orderDelivery{d("e0", "r", 0, 10, "ack"), d("e1", "r", 20, 30, "ack")}},
		{name: "retried, then in order", ds: []orderDelivery{d("e0", "r", 0, 10, "retry"), d("e0", "s", 20, 30, "ack"),
			d("e1", "r", 40, 50, "ack")}},
		{name: "next before the retry", ds: []orderDelivery{d("e0", "r", 0, 10, "retry"), d("e1", "s", 20, 30, "ack"),
			d("e0", "r", 40, 50, "ack")}, violations: 1},
		{name: "next while in the handler", ds: []orderDelivery{d("e0", "r", 0, 10, "ack"), d("e1", "s", 5, 30, "ack")},
			violations: 1, concurrent: 1},
		{name: "acked event delivered again", ds: []orderDelivery{d("e0", "r", 0, 10, "ack"), d("e1", "s", 20, 30, "ack"),
			d("e0", "s", 25, 35, "ack")}, excused: 1},
		{name: "lease ran out in the handler", ds: []orderDelivery{d("e0", "r", 0, 40, "ack"), d("e0", "s", 5, 10, "ack"),
			d("e1", "s", 20, 30, "ack")}, excused: 1},
		{name: "killed, then delivered again", ds: []orderDelivery{d("e0", "victim", 0, 0, ""), d("e0", "s", 60, 70, "ack"),
			d("e1", "s", 80, 90, "ack")}, killedAt: map[string]int64{"victim": 50}},
		{name: "next while a killed relay held it", ds: []orderDelivery{d("e0", "victim", 0, 0, ""), d("e1", "s", 20, 30, "ack"),
			d("e0", "s", 60, 70, "ack")}, killedAt: map[string]int64{"victim": 50}, violations: 1, concurrent: 1},
	} {
		o := checkOrder(events, c.ds, c.killedAt)
		require.Equal(t, c.violations, o.violations, "%s: violations: %s", c.name, o)
		require.Equal(t, c.concurrent, o.concurrent, "%s: concurrent: %s", c.name, o)
		require.Equal(t, c.excused, o.excused, "%s: excused: %s", c.name, o)
	}
}
