package outbox

import (
	"context"
	"time"
)

// Limits of what an [Inbox] records, which its table's columns hold.
const (
	MaxConsumerLen    = 128
	MaxProcessedIDLen = 255
)

// Inbox is the consumer's side of at-least-once delivery: a record, in the
// consumer's own database, of the events each of its consumers has
// processed. A handler's writes and the record that it ran commit in one
// transaction, so an event delivered twice has its effects once. The
// Watermill middleware Deduplicate (package middleware) runs handlers this
// way; the dialects' stores implement it (postgres.Store, mysql.Store,
// sqlite.Store).
type Inbox[Tx any] interface {
	// InTx begins a transaction on the inbox's database and runs fn in it
	// as [RunInTx] does.
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
	// [ErrInvalidRequest] for an empty consumer or id, or one longer than
	// [MaxConsumerLen] or [MaxProcessedIDLen] characters.
	MarkProcessed(ctx context.Context, tx Tx, consumer, id string) (bool, error)

	// PurgeProcessed deletes the records older than olderThan, in batches
	// of [DefaultPurgeBatch] rows, and returns how many it deleted. An event
	// delivered again after its record is gone is processed again: keep
	// records longer than an event can take to come back (its producer's
	// retries and leases, a consumer group rewound).
	PurgeProcessed(ctx context.Context, olderThan time.Duration) (int64, error)
}

// ValidateProcessed reports a consumer or event id that
// [Inbox.MarkProcessed] refuses, as an [ErrInvalidRequest].
func ValidateProcessed(consumer, id string) error {
	if err := ValidateConsumer(consumer); err != nil {
		return err
	}
	return validateName("event id", id, MaxProcessedIDLen)
}

// ValidateConsumer reports a consumer name that [Inbox.MarkProcessed]
// refuses, as an [ErrInvalidRequest].
func ValidateConsumer(consumer string) error {
	return validateName("consumer", consumer, MaxConsumerLen)
}

func validateName(what, value string, max int) error {
	if value == "" {
		return invalidRequest("inbox: empty %s", what)
	}
	if reason := checkText(value, max); reason != "" {
		return invalidRequest("inbox: %s %s", what, reason)
	}
	return nil
}
