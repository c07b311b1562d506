package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wmoutbox/wmoutbox/forward"
	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// outboxTopic is the topic every bench event is written on; the relays
// forward it to the sink's topic.
const (
	outboxTopic = "orders"
	sinkTopic   = "orders-out"
)

// benchMessage is event i as the Watermill message a service publishes,
// of its aggregate in backlog shape s.
func benchMessage(ctx context.Context, i int, s shape) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), payload(i))
	msg.Metadata.Set(watermilladapter.MetadataEventType, eventType)
	msg.Metadata.Set(watermilladapter.MetadataAggregateType, aggregateType)
	msg.Metadata.Set(watermilladapter.MetadataAggregateID, s.aggregateOf(i))
	msg.Metadata.Set(keySeq, strconv.Itoa(i))
	msg.SetContext(ctx)
	return msg
}

// writer is a service that writes events and relays none: with notify,
// its publisher notifies the relays of other processes after each commit;
// without, it leaves them to find the events (log relays read them from
// the log).
type writer struct {
	store    *postgres.Store
	pub      *watermilladapter.Publisher[pgx.Tx]
	notifier *postgres.Notifier // nil without notify
}

func newWriter(pool *pgxpool.Pool, table postgres.Config, notify bool) (*writer, error) {
	store, err := postgres.NewStore(pool, table)
	if err != nil {
		return nil, err
	}
	w := &writer{store: store}
	var cfg watermilladapter.PublisherConfig
	if notify {
		if w.notifier, err = postgres.NewNotifier(pool, table); err != nil {
			return nil, err
		}
		cfg.Notify = w.notifier.Notify
	}
	if w.pub, err = watermilladapter.NewPublisher(store, cfg); err != nil {
		return nil, errors.Join(err, w.closeNotifier())
	}
	return w, nil
}

func (w *writer) close() error { return errors.Join(w.pub.Close(), w.closeNotifier()) }

func (w *writer) closeNotifier() error {
	if w.notifier == nil {
		return nil
	}
	return w.notifier.Close()
}

// fill writes events [from, to) in transactions of 1000, untimed, in
// aggregates of perAggregate events (see aggregateOf), each event in its
// place: an aggregate's events are written in the order of their numbers.
func (w *writer) fill(ctx context.Context, from, to int, s shape) error {
	const perTx = 1000
	for lo := from; lo < to; lo += perTx {
		hi := min(lo+perTx, to)
		msgs := make([]*message.Message, 0, hi-lo)
		for i := lo; i < hi; i++ {
			msgs = append(msgs, benchMessage(ctx, i, s))
		}
		err := w.store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			return w.pub.WithTx(tx).Publish(outboxTopic, msgs...)
		})
		if err != nil {
			return fmt.Errorf("fill: %w", err)
		}
	}
	return nil
}

// relay is one process's outbox: a subscriber relaying outboxTopic to a
// downstream publisher through forward.Handler, woken by a listener, and
// a publisher whose hot path is the subscriber; or, in log mode, a
// subscriber reading the table's slot (see openRelay), and a
// publisher that hands it nothing.
type relay struct {
	store    *postgres.Store
	sub      *watermilladapter.Subscriber
	pub      *watermilladapter.Publisher[pgx.Tx]
	listener *postgres.Listener // nil in log mode
	routing  *routing
}

func startRelay(ctx context.Context, pool *pgxpool.Pool, table postgres.Config, downstream message.Publisher, cfg watermilladapter.SubscriberConfig, mws ...message.HandlerMiddleware) (*relay, error) {
	return openRelay(ctx, pool, table, downstream, cfg, false, mws...)
}

// openRelay starts a relay, in log mode with logMode: its subscriber
// then reads the slot of logFeedConfig(table), which it creates if
// missing, and openRelay returns once it reads (so it must be the table's
// only log relay: another would stand by).
func openRelay(ctx context.Context, pool *pgxpool.Pool, table postgres.Config, downstream message.Publisher, cfg watermilladapter.SubscriberConfig, logMode bool, mws ...message.HandlerMiddleware) (*relay, error) {
	store, err := postgres.NewStore(pool, table)
	if err != nil {
		return nil, err
	}
	var feed *readingFeed
	if logMode {
		if feed, err = newReadingFeed(store, table); err != nil {
			return nil, err
		}
		cfg.Feed = feed
	}
	sub, err := watermilladapter.NewSubscriber(store, cfg)
	if err != nil {
		return nil, err
	}
	r := &relay{store: store, sub: sub}
	var pubCfg watermilladapter.PublisherConfig
	if !logMode {
		pubCfg.HotPath = sub
	}
	if r.pub, err = watermilladapter.NewPublisher(store, pubCfg); err != nil {
		return nil, errors.Join(err, sub.Close())
	}
	if !logMode {
		if r.listener, err = postgres.Listen(pool, table, sub.Wake); err != nil {
			return nil, errors.Join(err, sub.Close())
		}
	}
	if r.routing, err = startRouting(ctx, sub, downstream, mws...); err != nil {
		return nil, errors.Join(err, r.close())
	}
	if feed != nil {
		if err := feed.waitReading(ctx); err != nil {
			return nil, errors.Join(err, r.close())
		}
	}
	return r, nil
}

func (r *relay) close() error {
	var errs []error
	if r.routing != nil {
		errs = append(errs, r.routing.close())
	}
	if r.listener != nil {
		errs = append(errs, r.listener.Close())
	}
	if r.pub != nil {
		errs = append(errs, r.pub.Close())
	}
	errs = append(errs, r.sub.Close())
	return errors.Join(errs...)
}

// routing is a Watermill router forwarding outboxTopic of a subscriber to
// a downstream publisher through forward.Handler, behind
// middleware.RecordErrors and then mws.
type routing struct {
	router *message.Router
	runErr chan error
}

func startRouting(ctx context.Context, sub message.Subscriber, downstream message.Publisher, mws ...message.HandlerMiddleware) (*routing, error) {
	handler, err := forward.Handler(forward.Config{
		Publisher: downstream,
		Topic:     func(*message.Message) (string, error) { return sinkTopic, nil },
	})
	if err != nil {
		return nil, err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	router.AddMiddleware(outboxmw.RecordErrors)
	router.AddMiddleware(mws...)
	router.AddConsumerHandler("forward", outboxTopic, sub, handler)
	r := &routing{router: router, runErr: make(chan error, 1)}
	go func() { r.runErr <- router.Run(ctx) }()
	select {
	case <-router.Running():
		return r, nil
	case err := <-r.runErr:
		r.runErr <- err
		return nil, errors.Join(err, r.close())
	}
}

func (r *routing) close() error { return errors.Join(r.router.Close(), <-r.runErr) }

// closeAll closes relays, concurrently: each Close drains its own
// handlers.
func closeAll(relays []*relay) error {
	errs := make([]error, len(relays))
	var wg sync.WaitGroup
	for i, r := range relays {
		wg.Go(func() { errs[i] = r.close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// placement is where the relay of a write-path or latency run runs, and
// how it learns of the writers' commits.
type placement int

const (
	// inProcess: in the writers' process, on their pool, handed each
	// committed event by their publisher (the hot path).
	inProcess placement = iota
	// otherProcess: on a pool of its own, as another process's relay
	// would be, woken by the writers' notifications (the cold path).
	otherProcess
	// logReader: on a pool of its own, in log mode, reading the table's
	// slot, made before the relay starts; the writers neither hand it
	// events nor notify it.
	logReader
)

// startOutbox starts a relay (subscriber configuration cfg) on table,
// placed at where, forwarding to downstream, and returns the store and
// publisher to write with, and what closes them (and drops the log relay's
// slot and publication): the relay's own, whose hot path is its
// subscriber; or a writer on pool, which notifies the relay of another
// process and leaves a log relay to read the log.
func startOutbox(ctx context.Context, db *database, pool *pgxpool.Pool, table postgres.Config, downstream message.Publisher, where placement, cfg watermilladapter.SubscriberConfig) (_ *postgres.Store, _ *watermilladapter.Publisher[pgx.Tx], _ func() error, err error) {
	if where == inProcess {
		r, err := startRelay(ctx, pool, table, downstream, cfg)
		if err != nil {
			return nil, nil, nil, err
		}
		return r.store, r.pub, r.close, nil
	}
	closeLog := func() error { return nil }
	if where == logReader {
		if closeLog, err = openLog(ctx, pool, table); err != nil {
			return nil, nil, nil, err
		}
	}
	relayPool, err := db.pool(ctx)
	if err != nil {
		return nil, nil, nil, errors.Join(err, closeLog())
	}
	r, err := openRelay(ctx, relayPool, table, downstream, cfg, where == logReader)
	if err != nil {
		relayPool.Close()
		return nil, nil, nil, errors.Join(err, closeLog())
	}
	closeRelay := func() error {
		err := r.close()
		relayPool.Close()
		return errors.Join(err, closeLog())
	}
	w, err := newWriter(pool, table, where == otherProcess)
	if err != nil {
		return nil, nil, nil, errors.Join(err, closeRelay())
	}
	return w.store, w.pub, func() error { return errors.Join(w.close(), closeRelay()) }, nil
}

// writeSetting is what runs beside the writers of the write path: a relay
// forwarding to downstream, placed at relay, deleting delivered events
// (postgres.Config.DeleteDone) or not; with no downstream, no relay at all
// (the writer alone, its events left for another process). With routerOnly
// there is no relay: each writer hands its message, once committed, to a
// Watermill GoChannel that a router forwards to downstream as the relay's
// router does. That is what delivering each commit through a Watermill
// router costs with no outbox behind it: the floor of any relay that
// delivers through one.
type writeSetting struct {
	name       string
	downstream func(recv func(*message.Message)) (message.Publisher, func() error, error)
	deleteDone bool
	relay      placement
	routerOnly bool
}

// oursWrite is the write path: writers, each writing one event per
// business transaction, beside what setting runs. Only the writes are
// timed.
func oursWrite(ctx context.Context, db *database, pool *pgxpool.Pool, n, writers int, setting writeSetting) (_ window, err error) {
	table, drop, err := freshTable(ctx, pool, "bench_write")
	if err != nil {
		return window{}, err
	}
	defer drop()
	table.DeleteDone = setting.deleteDone
	t := newTally(n)
	var down message.Publisher
	if setting.downstream != nil {
		var closeDown func() error
		if down, closeDown, err = setting.downstream(t.recv); err != nil {
			return window{}, err
		}
		defer func() { err = errors.Join(err, closeDown()) }()
	}
	var (
		store     *postgres.Store
		pub       *watermilladapter.Publisher[pgx.Tx]
		committed = func(*message.Message) error { return nil }
	)
	if down != nil && !setting.routerOnly {
		var closeOutbox func() error
		if store, pub, closeOutbox, err = startOutbox(ctx, db, pool, table, down, setting.relay, watermilladapter.SubscriberConfig{}); err != nil {
			return window{}, err
		}
		defer func() { err = errors.Join(err, closeOutbox()) }()
	} else {
		if store, err = postgres.NewStore(pool, table); err != nil {
			return window{}, err
		}
		if pub, err = watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{}); err != nil {
			return window{}, err
		}
		if down != nil { // router delivery alone
			in := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
			var r *routing
			if r, err = startRouting(ctx, in, down); err != nil {
				return window{}, errors.Join(err, in.Close())
			}
			defer func() { err = errors.Join(err, r.close(), in.Close()) }()
			committed = func(msg *message.Message) error { return in.Publish(outboxTopic, msg) }
		}
	}

	watch := startWatch(ctx, pool)
	err = parallel(writers, n, func(i int) error {
		var msg *message.Message
		err := store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			msg = benchMessage(ctx, i, eachOwn)
			return pub.Publish(outboxTopic, msg)
		})
		if err != nil {
			return err
		}
		return committed(msg)
	})
	w := watch.stop(n)
	if err != nil || down == nil {
		return w, err
	}
	if err := t.wait(ctx, nil); err != nil {
		return window{}, err
	}
	if setting.relay == logReader {
		w.walSender = walSenderPerEvent(ctx, pool, table, n)
	}
	w.duplicates = t.duplicates()
	return w, t.check("write path")
}

// parallel runs do(i) for i in [0, n) on workers goroutines, each taking
// every workers-th i, and returns the first error.
func parallel(workers, n int, do func(i int) error) error {
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if err := do(i); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// backlogTable returns a fresh outbox table holding n due events in
// aggregates of perAggregate (see writer.fill), analyzed as autovacuum
// would leave it, and the function that drops it.
func backlogTable(ctx context.Context, pool *pgxpool.Pool, prefix string, n int, s shape) (_ postgres.Config, drop func(), err error) {
	table, drop, err := freshTable(ctx, pool, prefix)
	if err != nil {
		return table, nil, err
	}
	if err := fillBacklog(ctx, pool, table, n, s); err != nil {
		drop()
		return table, nil, err
	}
	return table, drop, nil
}

// fillBacklog writes n due events into table in shape s (see
// writer.fill), and analyzes it as autovacuum would.
func fillBacklog(ctx context.Context, pool *pgxpool.Pool, table postgres.Config, n int, s shape) error {
	w, err := newWriter(pool, table, true)
	if err != nil {
		return err
	}
	err = w.fill(ctx, 0, n, s)
	if err = errors.Join(err, w.close()); err != nil {
		return err
	}
	return analyze(ctx, pool, table.Table)
}

// drainSetting is how oursDrain relays: the subscriber's configuration,
// whether delivered events are deleted (postgres.Config.DeleteDone), and
// whether the relay reads them from the log (log mode) rather than claim
// them; and the shape of the backlog it drains.
type drainSetting struct {
	name       string
	cfg        watermilladapter.SubscriberConfig
	deleteDone bool
	// syncBookkeeping has the relay's statements wait for the WAL flush
	// (postgres.Config.SynchronousBookkeeping).
	syncBookkeeping bool
	log             bool
	shape           shape
}

// ordered is s with ordered claims (SubscriberConfig.Ordered), draining a
// backlog of shape backlog.
func (s drainSetting) ordered(backlog shape) drainSetting {
	s.cfg.Ordered = true
	s.shape = backlog
	s.name += ", ordered, " + backlog.String()
	return s
}

// oursDrain fills a backlog of n events, then times instances relays (on
// pools of their own, as separate processes would be) until the sink has
// every event. An ordered setting's drain fails if an event reached the
// sink after a later one of its aggregate. In log mode (one instance),
// the table's slot is made before the backlog is written, so that the
// backlog is in its stream, and dropped at the end. The window counts the
// table's row versions per event, the backlog's inserts included.
func oursDrain(ctx context.Context, db *database, pool *pgxpool.Pool, n, instances int, setting drainSetting, downstream func(recv func(*message.Message)) (message.Publisher, func() error, error)) (_ window, err error) {
	table, drop, err := freshTable(ctx, pool, "bench_drain")
	if err != nil {
		return window{}, err
	}
	defer drop()
	if setting.log {
		closeLog, openErr := openLog(ctx, pool, table)
		if openErr != nil {
			return window{}, openErr
		}
		defer func() { err = errors.Join(err, closeLog()) }()
	}
	if err := fillBacklog(ctx, pool, table, n, setting.shape); err != nil {
		return window{}, err
	}
	table.DeleteDone, table.SynchronousBookkeeping = setting.deleteDone, setting.syncBookkeeping

	t := newTally(n)
	if setting.cfg.Ordered {
		t.checkOrder(setting.shape)
	}
	var mws []message.HandlerMiddleware
	var gaps *handoffs
	if setting.cfg.Ordered {
		gaps = newHandoffs()
		mws = append(mws, gaps.middleware)
	}
	pub, closeDownstream, err := downstream(t.recv)
	if err != nil {
		return window{}, err
	}
	defer func() { err = errors.Join(err, closeDownstream()) }()
	pools := make([]*pgxpool.Pool, instances)
	for i := range pools {
		if pools[i], err = db.pool(ctx); err != nil {
			return window{}, err
		}
		defer pools[i].Close()
	}

	watch := startWatch(ctx, pool)
	relays := make([]*relay, 0, instances)
	defer func() { err = errors.Join(err, closeAll(relays)) }()
	for _, p := range pools {
		r, err := openRelay(ctx, p, table, pub, setting.cfg, setting.log, mws...)
		if err != nil {
			return window{}, err
		}
		relays = append(relays, r)
	}
	if err := t.wait(ctx, nil); err != nil {
		return window{}, err
	}
	var sender time.Duration
	if setting.log {
		// Its WAL sender started with the relay, and ends with it.
		sender = walSenderPerEvent(ctx, pool, table, n)
	}
	// The drain ends when every outcome is recorded, as the raw loops'
	// ends with their last marking: the relays hold the last outcomes for
	// up to the settler's linger, and closing them writes those.
	stopping := relays
	relays = nil
	if err := closeAll(stopping); err != nil {
		return window{}, err
	}
	w := watch.stop(n)
	w.walSender = sender
	if err := requireRecorded(ctx, pool, table.Table, n); err != nil {
		return window{}, err
	}
	w.duplicates = t.duplicates()
	if gaps != nil {
		w.handoffs = gaps.sample()
	}
	if w.versions, err = tableVersions(ctx, pool, table.Table, n, pools...); err != nil {
		return window{}, err
	}
	return w, t.check("drain")
}

// requireRecorded fails unless each of the n events of table was recorded
// DONE (or deleted, as delivered).
func requireRecorded(ctx context.Context, pool *pgxpool.Pool, table string, n int) error {
	var pending int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()+" WHERE status <> 1").Scan(&pending); err != nil {
		return err
	}
	if pending > 0 {
		return fmt.Errorf("%d of %d delivered events not recorded DONE after the relays stopped", pending, n)
	}
	return nil
}

// toSink is a downstream for oursDrain and oursWrite: the GoChannel sink.
func toSink(ctx context.Context) func(recv func(*message.Message)) (message.Publisher, func() error, error) {
	return func(recv func(*message.Message)) (message.Publisher, func() error, error) {
		s, err := startSink(ctx, sinkTopic, recv)
		if err != nil {
			return nil, nil, err
		}
		return s.pub, s.close, nil
	}
}

// oursLatency writes count events at latencyRate, one per business
// transaction, and returns each one's time from commit to the sink. The
// writing process relays them itself (the hot path; with cfg.Ordered,
// claims its Publisher wakes at the commit); placed in another process, a
// writer with no relay commits them and a relay on another pool, woken by
// the writer's notification, delivers them (the cold path), with the
// default poll interval; placed as a log reader, that relay reads them
// from the log, and nothing notifies it.
func oursLatency(ctx context.Context, db *database, pool *pgxpool.Pool, count int, where placement, cfg watermilladapter.SubscriberConfig) (_ latencySample, err error) {
	table, drop, err := freshTable(ctx, pool, "bench_latency")
	if err != nil {
		return latencySample{}, err
	}
	defer drop()
	t := newLatencyTally(count)
	snk, err := startSink(ctx, sinkTopic, t.recv)
	if err != nil {
		return latencySample{}, err
	}
	defer func() { err = errors.Join(err, snk.close()) }()

	store, pub, closeOutbox, err := startOutbox(ctx, db, pool, table, snk.pub, where, cfg)
	if err != nil {
		return latencySample{}, err
	}
	defer func() { err = errors.Join(err, closeOutbox()) }()

	committed := make([]time.Time, count)
	err = paced(ctx, count, func(i int) error {
		return store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			// Registered first, so it runs first after the commit.
			if err := outbox.AfterCommit(ctx, func(context.Context) error { committed[i] = time.Now(); return nil }); err != nil {
				return err
			}
			return pub.Publish(outboxTopic, benchMessage(ctx, i, eachOwn))
		})
	})
	if err != nil {
		return latencySample{}, err
	}
	if err := t.wait(ctx, nil); err != nil {
		return latencySample{}, err
	}
	return t.sample(committed), t.check("latency")
}

// paced calls write(i) for i in [0, count) at latencyRate, each at its
// own scheduled time so that a slow write does not cause a burst.
func paced(ctx context.Context, count int, write func(i int) error) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	start := time.Now()
	for i := range count {
		due := start.Add(time.Duration(i) * time.Second / latencyRate)
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := write(i); err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
	}
	return nil
}
