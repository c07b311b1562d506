package outbox

import (
	"context"
	"time"
)

// Inbox is the consumer's side of at-least-once delivery: a record, in the
// consumer's own database, of the events each of its consumers has
// processed. A handler's writes and the record that it ran commit in one
// transaction, so an event delivered twice has its effects once. The
// Watermill middleware Deduplicate (package middleware) runs handlers this
// way; [Store] implements it, in the inbox table of its dialect.
type Inbox[Tx any] interface {
	// InTx begins a transaction on the inbox's database and runs fn in it
	// as [Store.InTx] does.
	InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error

	// MarkProcessed records in tx that consumer processed the event id,
	// and reports whether that is new: false when a committed transaction
	// recorded it already. While another transaction that recorded it is
	// open, it waits for that one to end, and records it if that one rolled
	// back. On PostgreSQL a transaction with one snapshot (REPEATABLE READ,
	// SERIALIZABLE) fails with a serialization error instead; on MySQL,
	// with several waiting, the server may roll one back as a deadlock
	// victim; on SQLite the wait lasts at most the store's busy timeout,
	// then it fails. Each of these is an error to retry, never a second
	// record. It fails with [ErrNoTransaction] for a nil tx and with
	// [ErrInvalidRequest] for an empty consumer or id, a consumer longer
	// than 128 characters or an id longer than 255.
	MarkProcessed(ctx context.Context, tx Tx, consumer, id string) (bool, error)

	// PurgeProcessed deletes the records older than olderThan, in batches
	// of 1000 rows, and returns how many it deleted. An event
	// delivered again after its record is gone is processed again: keep
	// records longer than an event can take to come back (its producer's
	// retries and leases, a consumer group rewound).
	PurgeProcessed(ctx context.Context, olderThan time.Duration) (int64, error)
}
