package main

// The baseline: Watermill's own outbox, the forwarder component
// (components/forwarder) over watermill-sql v4 on pgx. Events are written
// through forwarder.NewPublisher wrapping a watermill-sql publisher bound to
// the caller's pgx.Tx; forwarder.NewForwarder reads them back with a
// watermill-sql subscriber and publishes them to an in-process GoChannel sink.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// forwarderSetting is one configuration of the Watermill forwarder baseline.
type forwarderSetting struct {
	name         string        // "default" or "tuned", printed in the table
	pollInterval time.Duration // watermill-sql subscriber poll interval
	batchSize    int           // rows the subscriber reads per query (the schema adapter's batch size)
	// asyncCommit: the subscriber's transactions, which record the
	// offsets, commit without waiting for the WAL flush, as our relay's
	// bookkeeping does. A crash then loses the latest offsets, and their
	// messages are delivered again.
	asyncCommit bool
}

var (
	// Watermill-sql v4.1.5's own defaults: SubscriberConfig.setDefaults sets
	// PollInterval to 1s (subscriber.go), and DefaultPostgreSQLSchema.batchSize
	// falls back to SubscribeBatchSize 100 (schema_adapter_postgresql.go).
	forwarderDefault = forwarderSetting{name: "default", pollInterval: time.Second, batchSize: 100}
	// tuned: the best the baseline can be configured to do.
	forwarderTuned = forwarderSetting{name: "tuned", pollInterval: 10 * time.Millisecond, batchSize: 1000, asyncCommit: true}
)

const (
	// fwdSinkTopic is the destination topic on the sink; the forwarder topic
	// (the table) is random per run.
	fwdSinkTopic = "orders"

	fwdKeyEventType     = "event_type"
	fwdKeyAggregateType = "aggregate_type"
	fwdKeyAggregateID   = "aggregate_id"

	// fwdFillBatch events per fill transaction: 3 bind parameters each, well
	// under PostgreSQL's 65535.
	fwdFillBatch = 1000

	// fwdConsumerGroup is the subscriber's consumer group, watermill-sql's
	// default, whose row of the offsets table the drain watches.
	fwdConsumerGroup = ""

	// fwdAckTimeout bounds the wait for the last offset once every event
	// is delivered: the forwarder acks a batch a few milliseconds after
	// its last delivery.
	fwdAckTimeout = 30 * time.Second
)

// fwdMessage is event i as a Watermill message.
func fwdMessage(ctx context.Context, i int) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), payload(i))
	msg.Metadata.Set(fwdKeyEventType, eventType)
	msg.Metadata.Set(fwdKeyAggregateType, aggregateType)
	msg.Metadata.Set(fwdKeyAggregateID, aggregateID(i))
	msg.Metadata.Set(keySeq, strconv.Itoa(i))
	// watermill-sql's Publish runs its INSERT with the first message's context.
	msg.SetContext(ctx)
	return msg
}

// fwdRig is one forwarder pipeline on its own topic: schema, subscriber,
// forwarder and sink.
type fwdRig struct {
	pool    *pgxpool.Pool
	subPool *pgxpool.Pool // the subscriber's: pool, or one of its own for asyncCommit
	topic   string
	schema  wsql.DefaultPostgreSQLSchema
	offsets wsql.DefaultPostgreSQLOffsetsAdapter
	log     *errLog

	sink   *sink
	fwd    *forwarder.Forwarder
	runErr chan error
}

// newFwdRig creates the watermill-sql tables of a fresh forwarder topic.
//
// DefaultPostgreSQLSchema with DefaultPostgreSQLOffsetsAdapter: the pair the
// watermill-sql docs name as the default and that the forwarder docs' outbox
// example uses (its MySQL twin). It keeps every row and tracks a per-consumer
// group offset by (transaction_id, offset), which gives ordering and does not
// miss rows of transactions that commit out of order. The queue schema
// (PostgreSQLQueueSchema + PostgreSQLQueueOffsetsAdapter{DeleteOnAck}) is the
// documented alternative, advised only for very long transactions.
func newFwdRig(ctx context.Context, pool *pgxpool.Pool, s forwarderSetting) (*fwdRig, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	r := &fwdRig{
		pool:    pool,
		subPool: pool,
		topic:   "bench_fwd_" + hex.EncodeToString(b[:]),
		schema:  wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: s.batchSize},
		log:     &errLog{},
	}
	if s.asyncCommit {
		cfg := pool.Config()
		if cfg.ConnConfig.RuntimeParams == nil {
			cfg.ConnConfig.RuntimeParams = map[string]string{}
		}
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
		var err error
		if r.subPool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return nil, fmt.Errorf("forwarder: subscriber pool: %w", err)
		}
	}
	sub, err := r.subscriber(s)
	if err != nil {
		return nil, errors.Join(err, r.close())
	}
	if err := sub.SubscribeInitialize(r.topic); err != nil {
		return nil, errors.Join(fmt.Errorf("forwarder: initialize schema: %w", err), r.close())
	}
	return r, nil
}

func (r *fwdRig) subscriber(s forwarderSetting) (*wsql.Subscriber, error) {
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(r.subPool), wsql.SubscriberConfig{
		ConsumerGroup:  fwdConsumerGroup,
		PollInterval:   s.pollInterval,
		SchemaAdapter:  r.schema,
		OffsetsAdapter: r.offsets,
	}, r.log)
	if err != nil {
		return nil, fmt.Errorf("forwarder: new subscriber: %w", err)
	}
	return sub, nil
}

// publishTx writes msgs in tx, as an application would: a watermill-sql
// publisher bound to the transaction (one per transaction, as its docs say),
// decorated by the forwarder's publisher.
func (r *fwdRig) publishTx(tx pgx.Tx, msgs ...*message.Message) error {
	pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: r.schema}, r.log)
	if err != nil {
		return fmt.Errorf("forwarder: new publisher: %w", err)
	}
	fpub := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: r.topic})
	if err := fpub.Publish(fwdSinkTopic, msgs...); err != nil {
		return fmt.Errorf("forwarder: publish: %w", err)
	}
	return nil
}

// start runs the forwarder into a GoChannel sink whose handler calls recv
// for each message, then acks it. It returns once the forwarder runs.
func (r *fwdRig) start(ctx context.Context, s forwarderSetting, recv func(*message.Message)) error {
	sink, err := startSink(ctx, fwdSinkTopic, recv)
	if err != nil {
		return fmt.Errorf("forwarder: %w", err)
	}
	r.sink = sink

	sub, err := r.subscriber(s)
	if err != nil {
		return err
	}
	r.fwd, err = forwarder.NewForwarder(sub, r.sink.pub, r.log, forwarder.Config{
		ForwarderTopic: r.topic,
		CloseTimeout:   5 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("forwarder: new forwarder: %w", err)
	}
	r.runErr = make(chan error, 1)
	go func() { r.runErr <- r.fwd.Run(ctx) }()
	select {
	case <-r.fwd.Running():
		return nil
	case err := <-r.runErr:
		r.runErr <- err
		return fmt.Errorf("forwarder: run: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lastOffset is the offset of the topic's last row in the subscriber's
// order (transaction id, then offset): the offset the forwarder acks last.
func (r *fwdRig) lastOffset(ctx context.Context) (int64, error) {
	var last int64
	err := r.pool.QueryRow(ctx, `SELECT "offset" FROM `+r.schema.MessagesTable(r.topic)+
		` ORDER BY transaction_id DESC, "offset" DESC LIMIT 1`).Scan(&last)
	if err != nil {
		return 0, fmt.Errorf("forwarder: last offset: %w", err)
	}
	return last, nil
}

// ackedOffset is the offset the forwarder's consumer group has acked, as
// committed in watermill-sql's offsets table.
func (r *fwdRig) ackedOffset(ctx context.Context) (int64, error) {
	var acked int64
	err := r.pool.QueryRow(ctx, `SELECT offset_acked FROM `+r.offsets.MessagesOffsetsTable(r.topic)+
		` WHERE consumer_group = $1`, fwdConsumerGroup).Scan(&acked)
	if err != nil {
		return 0, fmt.Errorf("forwarder: acked offset: %w", err)
	}
	return acked, nil
}

// waitAcked returns once the forwarder has acked offset last, or an
// error after fwdAckTimeout. The sink counts a message before the
// forwarder acks it, and the subscriber records a batch's offset after its
// last ack, dropping it if closed first: stopping at the last delivery
// left the last batch's offset unwritten.
func (r *fwdRig) waitAcked(ctx context.Context, last int64) error {
	ctx, cancel := context.WithTimeout(ctx, fwdAckTimeout)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var acked int64
	for {
		now, err := r.ackedOffset(ctx)
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("forwarder: offset %d of %d acked %s after the last delivery: %w",
				acked, last, fwdAckTimeout, context.Cause(ctx))
		case err != nil:
			return err
		case now == last:
			return nil
		}
		acked = now
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

// requireAcked fails unless the forwarder, stopped, has acked offset
// last, as requireRecorded checks our outcomes.
func (r *fwdRig) requireAcked(ctx context.Context, last int64) error {
	acked, err := r.ackedOffset(ctx)
	if err != nil {
		return err
	}
	if acked != last {
		return fmt.Errorf("forwarder: offset %d of %d acked after the forwarder stopped", acked, last)
	}
	return nil
}

// stop stops the forwarder, which closes its subscriber once the acked
// messages' offsets are committed.
func (r *fwdRig) stop() error {
	if r.fwd == nil {
		return nil
	}
	var errs []error
	errs = append(errs, r.fwd.Close())
	if err := <-r.runErr; err != nil {
		errs = append(errs, fmt.Errorf("forwarder: run: %w", err))
	}
	r.fwd = nil
	return errors.Join(errs...)
}

// close stops the forwarder and the sink, drops the topic's tables and
// closes the subscriber's own pool.
func (r *fwdRig) close() error {
	errs := []error{r.stop()}
	if r.sink != nil {
		errs = append(errs, r.sink.close())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := r.pool.Exec(ctx, "DROP TABLE IF EXISTS "+r.schema.MessagesTable(r.topic)+", "+
		r.offsets.MessagesOffsetsTable(r.topic))
	errs = append(errs, err)
	if r.subPool != r.pool {
		r.subPool.Close()
	}
	return errors.Join(errs...)
}

// forwarderDrain writes n events (untimed) through the forwarder's publisher into a fresh
// forwarder topic, each in a committed transaction or in large batches (whatever is fastest to fill;
// the fill is not measured), then starts the forwarder (watermill-sql subscriber -> forwarder ->
// gochannel publisher) and a gochannel subscriber that counts messages, and returns how long it took
// from forwarder start until all n messages reached the sink, the last offset was recorded and the
// forwarder stopped. It stops and cleans up everything it started.
func forwarderDrain(ctx context.Context, pool *pgxpool.Pool, n int, s forwarderSetting) (_ window, err error) {
	r, err := newFwdRig(ctx, pool, s)
	if err != nil {
		return window{}, err
	}
	defer func() { err = errors.Join(err, r.close()) }()

	for lo := 0; lo < n; lo += fwdFillBatch {
		hi := min(lo+fwdFillBatch, n)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			msgs := make([]*message.Message, 0, hi-lo)
			for i := lo; i < hi; i++ {
				msgs = append(msgs, fwdMessage(ctx, i))
			}
			return r.publishTx(tx, msgs...)
		})
		if err != nil {
			return window{}, fmt.Errorf("forwarder drain: fill: %w", err)
		}
	}
	// As for every backlog of the program: the statistics autovacuum would
	// gather a minute later.
	if _, err := pool.Exec(ctx, "ANALYZE "+r.schema.MessagesTable(r.topic)); err != nil {
		return window{}, fmt.Errorf("forwarder drain: analyze: %w", err)
	}
	last, err := r.lastOffset(ctx)
	if err != nil {
		return window{}, err
	}

	tally := newTally(n)
	watch := startWatch(ctx, pool)
	if err := r.start(ctx, s, tally.recv); err != nil {
		return window{}, err
	}
	if err := tally.wait(ctx, r.log); err != nil {
		return window{}, err
	}
	// As ours: the drain ends when the forwarder has stopped, every offset
	// recorded.
	if err := r.waitAcked(ctx, last); err != nil {
		return window{}, err
	}
	if err := r.stop(); err != nil {
		return window{}, err
	}
	w := watch.stop(n)
	if err := r.requireAcked(ctx, last); err != nil {
		return window{}, err
	}
	w.duplicates = tally.duplicates()
	return w, tally.check("forwarder drain")
}

// forwarderLatency runs the forwarder, then writes count events one per business transaction
// (BEGIN; publish through the forwarder publisher bound to that transaction; COMMIT), paced at
// `rate` events per second (no bursts: schedule by start time + i/rate), and returns, for each
// event, the time from its commit returning to the sink's handler receiving it, and the duplicates.
func forwarderLatency(ctx context.Context, pool *pgxpool.Pool, rate float64, count int, s forwarderSetting) (_ latencySample, err error) {
	if rate <= 0 {
		return latencySample{}, fmt.Errorf("forwarder latency: rate %v must be positive", rate)
	}
	r, err := newFwdRig(ctx, pool, s)
	if err != nil {
		return latencySample{}, err
	}
	defer func() { err = errors.Join(err, r.close()) }()

	tally := newLatencyTally(count)
	if err := r.start(ctx, s, tally.recv); err != nil {
		return latencySample{}, err
	}

	committed := make([]time.Time, count)
	timer := time.NewTimer(0)
	defer timer.Stop()
	start := time.Now()
	for i := range count {
		due := start.Add(time.Duration(float64(i) * float64(time.Second) / rate))
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return latencySample{}, ctx.Err()
			}
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return r.publishTx(tx, fwdMessage(ctx, i))
		})
		if err != nil {
			return latencySample{}, fmt.Errorf("forwarder latency: event %d: %w", i, err)
		}
		committed[i] = time.Now()
	}

	if err := tally.wait(ctx, r.log); err != nil {
		return latencySample{}, err
	}
	return tally.sample(committed), tally.check("forwarder latency")
}
