// Package watermilladapter connects the outbox to Watermill: a
// message.Publisher that writes outbox rows in the caller's transaction,
// and a message.Subscriber that relays committed events to router
// handlers, at least once.
//
// # Wiring
//
//	store, _ := postgres.NewStore(pool, postgres.Config{})
//	sub, _ := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{})
//	pub, _ := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: sub})
//
//	router.AddMiddleware(outboxmw.RecordErrors) // last_error and error classes
//	router.AddConsumerHandler("forward-orders", "orders", sub, forward)
//
//	// In business code:
//	err := store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
//		// ... business writes on tx ...
//		msg := message.NewMessage(watermill.NewUUID(), payload)
//		msg.SetContext(ctx) // carries tx; Watermill's CQRS EventBus does this
//		return pub.Publish("orders", msg)
//	})
//
// outboxmw is this module's middleware package, imported under that name
// beside Watermill's own middleware. The Subscriber is an
// [outbox.HotPath]: an outbox.Writer given it in its WriterConfig gets the
// same hot path as the Publisher.
//
// # Goroutines
//
// Each Subscribe starts a subscription: a claimer (the cold path), which
// claims due events onto a bounded cold queue; WorkerCount workers, which
// take events from the hot and cold queues, two hot for one cold, hand
// them to the output channel and turn their Ack or Nack into an outcome;
// and, with Metrics, an observer of queue depths and backlog. The writer's
// after-commit hook fills the bounded hot queue. One settler per
// Subscriber records the outcomes of every subscription in batches. The
// claimer's decisions are a pure state machine (when to claim, how much,
// from where, how long to wait), and every wait of the relay runs on
// SubscriberConfig.Clock.
//
// # Delivery
//
// After commit the events go straight to the subscriber's hot queue (the
// rows are written claimed by it, so other relays leave them alone), unless
// their transaction stayed open for half the claim after writing them:
// those are left to a claim once it ends. Every other event, and every
// event a full hot queue could not take, reaches a subscription through
// its cold path: claims of due rows with FOR UPDATE SKIP LOCKED, in
// batches, while there is backlog and room, and otherwise every
// PollInterval or when woken (a release, a scheduled retry). Through a
// backlog, each claim starts where the previous one ended (a cursor on the
// due index); a claim that comes back short is followed at once
// by one from the earliest due event, and so is the first claim after a
// second of backlog, so that an event that became due behind the cursor
// (its transaction committed late, its claim was released or ran out)
// waits a second at most, and no more than the end of the backlog.
//
// Ack records DONE, or deletes the event's row when the store is
// configured to delete delivered events (postgres.Config.DeleteDone).
// Nack records RETRY with the retry policy's backoff, or
// DEAD when the attempts are used up; with the handler error recorded
// ([RecordError], or the middleware package's RecordErrors), an
// outbox.Permanent error is DEAD at once, outbox.RetryAfter defers the
// event without spending an attempt, and outbox.FailRetryAfter spends one
// and has the event due again after its own delay rather than the
// policy's. Outcomes are written in batches by
// one goroutine per subscriber: what queued while the previous statement
// ran, or arrives within 50 ms of the first (250 outcomes end the wait
// sooner), goes into the next, so a row shows its outcome up to 50 ms
// after the handler's (the DONE of an ordered event ends the wait). A subscription's channel closes only once the
// outcomes of its messages are written, without waiting out those 50 ms,
// so closing the database after Router.Close loses none.
//
// Delivery is at least once: a crash between a handler's success and the
// DONE record means a second delivery after the claim's lease
// (SubscriberConfig.LockTimeout). Consumers deduplicate by
// [MetadataEventID], which forwarders should pass downstream. A handler
// that outlives the lease may see its event claimed and delivered again
// meanwhile, by another relay or by this one; its Ack still records DONE,
// its Nack changes nothing once another relay claimed the event (whose
// claim holds), and counts as the failed attempt it is when this relay
// did (the claims of one relay carry one owner).
//
// # Ordered delivery
//
// With SubscriberConfig.Ordered, the events of an aggregate (within a
// topic, the events with one AggregateType and AggregateID) reach the
// handlers one at a time, in the order they were written: a claim takes
// an event only once every earlier event of its aggregate is DONE, with a
// run of the due events after it (SubscriberConfig.OrderedRunLength),
// which one worker hands over in order, each as soon as the one before is
// acked; the subscription claims the aggregate again as soon as the run's
// last DONE is recorded. An event that is retried, deferred, scheduled for later or
// DEAD holds back the rest of its aggregate until it is delivered, or
// replayed and delivered, or purged. Different aggregates, and events
// without an AggregateID, are delivered WorkerCount at a time as usual.
// Ordered events skip the hot path: a writer or Publisher whose HotPath is
// the Subscriber wakes its claims at the commit instead, and a
// postgres.Listener does so across processes. With a forwarder that keys
// records by aggregate (forward/kafkaforward does), the order holds
// downstream too.
//
// Written means inserted: events of one aggregate written by transactions
// that run at the same time can commit in the other order, and a claim
// between the two commits takes the later event first. Transactions that
// change an aggregate normally take turns on its row (an UPDATE locks
// it); ones that do not, and must keep the order, lock it (SELECT … FOR
// UPDATE) before writing events.
//
// # Routing rule
//
// A subscription claims only its own topic. An event of a topic that no
// subscription serves stays pending in the table until a relay
// subscribes to the topic, and is counted meanwhile (Metrics.Unserved,
// read every BacklogInterval when Metrics is set): another process may
// serve the topic, so a relay that does not must not kill its events.
// Where every relay of the table has the same subscriptions,
// SubscriberConfig.UnroutableAfter applies the specification's rule for
// events no listener takes: such an event goes DEAD once it has waited
// that long, with last_error "no subscription for topic T within D". Each event goes to one
// subscription: several subscriptions of a topic, in one Subscriber or in
// several relays, share its events as consumers of one queue do.
//
// # Logging
//
// SubscriberConfig.Logger is a *slog.Logger, as every logger of this
// module (see package outbox), and nil means slog.Default(): a relay
// speaks up by default. A DEAD event, a failing claim, and a status write
// or release given up are logged at error level; an event left to a
// later claim (the hot queue full, a claim half spent in a queue or
// waiting for the reader, a transaction that outlived half the claim) at
// warn level, counted, one line per topic and cause a minute at most,
// with the number of events; a status write retried at warn level, one
// line per attempt; the release of an earlier run's claims at info
// level. docs/operations.md has the full list.
//
// # Misconfigurations refused
//
// The first Subscribe checks the store's table (outbox.Store.Check): a
// table that does not exist, or lacks migrations, fails it with an error
// matching outbox.ErrNotMigrated that names the migration to run. A
// second Subscribe to a topic on one Subscriber fails with
// [ErrTopicSubscribed] unless SubscriberConfig.AllowSharedTopic is set. A
// Publish whose message context holds no transaction of the store's type
// says what it found ("the store's transactions are pgx.Tx; the message
// context carries *sql.Tx"), or, with none, to call msg.SetContext(ctx)
// with the context InTx gave.
//
// # Watermill contract
//
// Publish is safe for concurrent use (on different transactions: one serves
// one statement at a time) and writes the messages of one call with one Write
// (one statement on PostgreSQL). The handler sees the published UUID, payload
// and metadata. A message's context ends on Ack, Nack, or Close. Close is
// idempotent, waits up to DrainTimeout for messages in handlers, releases
// unfinished claims at once, and closes the output channels before it returns.
// Neither Close closes the database pool.
package watermilladapter
