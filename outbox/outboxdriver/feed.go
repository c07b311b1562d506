package outboxdriver

import (
	"context"
	"time"
)

// Feed streams the events a database commits to the outbox table, in
// commit order, from a log of its changes rather than from claims: a
// PostgreSQL logical replication slot (postgres.NewLogFeed). A relay in
// log mode (watermilladapter.SubscriberConfig.Feed) delivers what it
// streams, and claims only what the stream leaves to the table: retries,
// events scheduled for later, and the NEW events the stream no longer
// holds (see [FeedHandler.Covered]).
type Feed interface {
	// Stream reads the log and hands h every committed transaction that
	// wrote events, in commit order, from the first one whose events
	// were not all settled when the log was last read. It retries what
	// fails (a lost connection, a database restart, another reader
	// holding the log, a log that was dropped and is made again) and
	// returns only when ctx ends, with nil, or for an error that retrying
	// cannot mend (a configuration the database refuses). Stream is
	// called by one goroutine at a time.
	Stream(ctx context.Context, h FeedHandler) error
}

// FeedHandler receives what a [Feed] streams. Its methods are called from
// the goroutine that runs Stream, one at a time.
type FeedHandler interface {
	// Transaction hands over the events of one committed transaction, in
	// the order they were written. It may block while the relay has no
	// room for them, until ctx ends (then it returns ctx's error, and the
	// feed stops reading). The relay calls tx.Settled once every event
	// of it is settled: its outcome recorded in the table, or left there
	// for a claim.
	Transaction(ctx context.Context, tx FeedTransaction) error
	// Reading tells whether this feed now reads the log (true) or waits
	// while another reader holds it, or for the database (false). Only a
	// reader's relay claims NEW events (see Covered).
	Reading(reading bool)
	// Covered tells that the NEW events created before t (by the clock
	// that wrote created_at) that are still pending are not in the rest
	// of the stream: they were skipped by the relay, or committed before
	// the log was made again after it was lost. Claims may take them. t
	// never goes back within one Stream call.
	Covered(t time.Time)
}

// FeedTransaction is one committed transaction's events.
type FeedTransaction struct {
	// Events are the rows the transaction inserted, as a claim reads
	// them (no lease, attempts 0), in insert order.
	Events []Row
	// CommitTime is when the database committed it, by the database's
	// clock.
	CommitTime time.Time
	// Settled is called once, by the relay, when every event of the
	// transaction is settled; the feed then lets the log go past it once
	// every transaction before it is settled too. It never blocks.
	Settled func()
}
