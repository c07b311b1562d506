// Package outbox is a transactional outbox: business code writes an event
// in the same database transaction as its state change, and a relay
// delivers each committed event at least once afterwards. An event is
// never published when its transaction rolls back, and never lost when a
// process, the database or a broker fails.
//
// This package is what an application uses: the [Envelope] it writes, the
// [Store] of its database (made by a dialect: outbox/postgres,
// outbox/mysql, outbox/sqlite), the [Writer], transactions with
// after-commit and after-rollback hooks, error classes for handlers
// ([Permanent], [RetryAfter], [FailRetryAfter]), the [RetryPolicy], and
// operator queries on dead events. Delivery is package
// watermilladapter's: a Watermill Subscriber that relays events to router
// handlers, and a Publisher that writes them. Store authors implement
// package outboxdriver; applications never need it.
//
// # Writing
//
// [Store.InTx] begins a transaction, runs your function and commits. A
// [Writer] writes envelopes through that transaction:
//
//	store, err := postgres.NewStore(pool, postgres.Config{})
//	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{})
//	writer, err := outbox.NewWriter(store, outbox.WriterConfig{HotPath: sub})
//
//	err = store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, `INSERT INTO orders ...`); err != nil {
//			return err
//		}
//		_, err := writer.Write(ctx, tx, outbox.NewJSON(OrderCreated, payload))
//		return err
//	})
//
// The events become visible with the commit and disappear with a
// rollback. With a [HotPath] (the Subscriber of this process), they are
// handed to it right after the commit and delivered without waiting for a
// poll; a relay in another process, or this one after a crash, claims them
// from the table. Write fails fast with [ErrNoTransaction] when given no
// transaction, and with a [*ValidationError] when an envelope is invalid;
// nothing is written then. A transaction you begin and commit yourself
// works too: its events are left to the relays' claims.
//
// [WriterConfig].BeforeWrite hooks see each write just before the insert,
// once the envelopes are validated, their defaults filled in and the
// [HeaderInjector]'s headers added: they run in order, may add headers
// (and change nothing else: the writer checks), and the first that
// returns an error refuses the write, nothing written, its error wrapped
// in Write's. [Envelope].DeliverIn delays an event relative to the write,
// as DeliverAfter does to a time.
//
// # Transactions and after-commit hooks
//
// Go has no thread-local transaction: [Store.InTx] passes the transaction
// and a context to your function, and runs the hooks registered with
// [AfterCommit] during it once it commits, in order. A rolled-back
// transaction runs those registered with [AfterRollback] instead, in
// order, once it has rolled back, whatever rolled it back: the function's
// error or panic, its context ending, a check before the commit, or a
// commit that failed. Exactly one of the two lists runs. A hook that fails
// or panics is logged and the next one runs; hooks never change what InTx
// returns. Both return [ErrNoCommitHooks] outside InTx's function. The
// context carries the transaction too ([TxFromContext]), which is how a
// Watermill publisher given it as message context writes in it.
//
// An InTx of a store on a transaction (PostgreSQL's store on a pgx.Tx)
// opens a savepoint. Its after-commit hooks wait for the enclosing
// transaction's commit; its after-rollback hooks run at once if the
// savepoint rolls back, and if it is released, when the enclosing
// transaction rolls back, after those registered there before. A
// savepoint can roll back while its transaction commits. Events written
// while one is open go to the hot path only if the savepoint kept them:
// the writer asks the driver just before the top-level commit.
//
// # Statuses
//
// A row is NEW when written, DONE once its delivery is acknowledged, RETRY
// after a failed attempt (due again later), and DEAD when it has no
// attempts left or failed permanently ([Status]). A row leaves NEW or
// RETRY only by a status update after the outcome of a delivery is known,
// so a crash at any point means a later delivery, never a lost event.
// Consumers deduplicate by the event id. DEAD events stay until
// [Store.ReplayDead] returns them to NEW or [Store.PurgeDead] or
// [Store.Purge] deletes them.
//
// # Operations
//
// [Store.Stats] counts every topic's events by status, with how long the
// oldest due event has waited and the claims in flight; [Store.QueryPending]
// pages through pending events, and [Store.AggregateEvents] through one
// aggregate's events of every status, newest first. DEAD events are found with a [DeadFilter]
// ([Store.QueryDead], [Store.CountDead]), grouped by failure reason
// ([Store.DeadGroups]: errors alike but for ids, numbers and addresses are
// one group), replayed ([Store.ReplayDead]) or deleted ([Store.PurgeDead]).
// [Store.Retain], run in every relay process, purges DONE events, DEAD
// events when asked, and inbox records on a schedule, one process at a
// time under a lease ([RetentionConfig]). docs/operations.md has the
// details.
//
// # Logging
//
// One rule for the whole module: whatever logs takes a *slog.Logger
// (a dialect's Config.Logger, [StoreConfig], [RetentionConfig],
// watermilladapter.SubscriberConfig, middleware.Intercept,
// kafkaforward.Config), and a nil one means slog.Default(), never
// silence: a relay that fails quietly is a trap. Errors are logged at
// error level, what costs latency but loses nothing (an event left to a
// later claim, a retried statement) at warn level, and routine notices at
// info level; docs/operations.md lists them. A Watermill router that
// logs through watermill.NewSlogLogger(logger) can share logger with the
// outbox. To silence the outbox, pass slog.New(slog.DiscardHandler).
//
// # Errors
//
// Errors read "package: operation: cause", the package named once:
// "postgres: claim: table outbox_event does not exist: run
// postgres.Migrate or `wmoutbox migrate up`". Match them with errors.Is
// against the sentinels of errors.go ([ErrNoTransaction],
// [ErrInvalidRequest], [ErrNotMigrated]...), never by their text. A
// missing or outdated table is found by [Store.Check], which a
// Subscriber runs at its first Subscribe.
//
// # Concurrency
//
// [Store] and [Writer] are safe for concurrent use. An [Envelope] is a
// plain value; the writer copies its headers and payload.
package outbox
