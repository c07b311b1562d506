// Package outbox is the engine of a transactional outbox: business code
// writes events in the same database transaction as its state change, and
// a relay delivers each committed event at least once afterwards.
//
// This package holds what does not depend on a database or a messaging
// library: the [Envelope] and its validation, [Status], the [Store] contract
// that dialects implement (see outbox/postgres, outbox/mysql and
// outbox/sqlite), the [Writer], the transaction helper [RunInTx] with
// after-commit hooks, the [RetryPolicy], and the [InFlight] tracker. The
// Watermill publisher and subscriber are in package watermilladapter.
//
// # Writing
//
// A [Writer] writes envelopes through the caller's transaction:
//
//	ids, err := writer.Write(ctx, tx, outbox.NewJSON(OrderCreated, payload))
//
// Write fails fast with [ErrNoTransaction] when given no transaction, and
// with a [*ValidationError] when an envelope is invalid; nothing is written
// then. The events become visible with the caller's commit and disappear
// with its rollback.
//
// # Transactions and after-commit hooks
//
// Go has no thread-local transaction: the InTx helpers (a dialect's InTx,
// built on [RunInTx]) begin a transaction, pass it and a context to your
// function, commit, and then run the hooks registered with [AfterCommit]
// during the function, in order. A rolled-back transaction runs none; a
// hook that fails or panics is logged and never fails the caller, whose
// transaction is committed. The writer registers its hot-path hook
// ([WriterConfig.AfterCommit]) this way, so that a relay in the same
// process delivers an event right after its commit; events written in a
// transaction you begin yourself wait for the poller instead.
//
// A savepoint can roll back while its transaction commits. Events written
// while one is open, through the transaction it is in or through one an
// InTx helper opened as a savepoint, go to the hot path only if the
// savepoint kept them: the store marks such writes ([Inserter.Insert]) and
// the writer asks it just before the top-level commit ([Inserter.Kept]).
// PostgreSQL marks a write with the subtransaction that made it and asks
// the server whether that is still part of the transaction; SQLite cannot
// tell, so there every hot write is looked up by id.
//
// # Statuses
//
// A row is NEW when written, DONE once its delivery is acknowledged, RETRY
// after a failed attempt (due again at available_at), and DEAD when it has
// no attempts left or failed permanently. A row leaves NEW or RETRY only by
// a status update after the outcome of a delivery is known, so a crash at
// any point means a later delivery, never a lost event. Consumers must
// deduplicate by the event id.
//
// # Concurrency
//
// [Writer], the stores and [InFlight] are safe for concurrent use. An
// [Envelope] is a plain value; the writer copies its headers and payload.
package outbox
