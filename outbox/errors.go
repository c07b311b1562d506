package outbox

import (
	"errors"
	"fmt"
)

var (
	// ErrNoTransaction is returned by [Writer.Write] and
	// [Store.MarkProcessed] when they are given no transaction (a nil Tx).
	// The outbox guarantee rests on writing events in the business
	// transaction, so the write fails before touching the database.
	ErrNoTransaction = errors.New("outbox: write requires a transaction")

	// ErrInvalidEnvelope is matched (errors.Is) by every [*ValidationError].
	ErrInvalidEnvelope = errors.New("outbox: invalid envelope")

	// ErrNoCommitHooks is returned by [AfterCommit] and [AfterRollback]
	// when the context does not come from [Store.InTx] (or its function
	// has returned), so there is no commit or rollback to run the hook
	// after. A savepoint's InTx (a store on a transaction) returns it too
	// when no InTx runs the transaction it is in.
	ErrNoCommitHooks = errors.New("outbox: context carries no transaction started by an InTx helper")

	// ErrDuplicateEvent is returned by [Writer.Write] (from the store's
	// insert) when an event id is already in the table. The transaction is
	// then aborted on PostgreSQL: roll it back. On SQLite it stays usable,
	// without any event of the failed write. A transaction of PostgreSQL's
	// InTx sends the insert with its next statement, which returns the
	// error, or with its commit: InTx returns it then.
	ErrDuplicateEvent = errors.New("outbox: duplicate event id")

	// ErrDuplicateKey is matched by the [*DuplicateKeyError] that
	// [Writer.Write] returns, with [WriterConfig.RejectDuplicateKeys], when
	// an event's topic and idempotency key are taken. Nothing of the write
	// was written, and the transaction is usable on every dialect: the
	// caller decides whether to commit it.
	ErrDuplicateKey = errors.New("outbox: duplicate idempotency key")

	// ErrNotFound is returned by [Store.Get] when no row has the event id.
	ErrNotFound = errors.New("outbox: event not found")

	// ErrInvalidRequest is matched by errors returned for malformed store
	// requests (a claim without an owner, a negative limit, an unknown status)
	// and invalid configurations. Nothing is written when it is returned.
	ErrInvalidRequest = errors.New("outbox: invalid request")

	// ErrNotMigrated is matched by a [*NotMigratedError]: the store's table
	// does not exist, or is at an older migration than this wmoutbox
	// needs. [Store.Check] returns it, so does watermilladapter's
	// Subscribe at a subscriber's first subscription, and a dialect's
	// claim or write that finds the table missing. Run the dialect's
	// Migrate (postgres.Migrate, mysql.Migrate, sqlite.Migrate) or
	// `wmoutbox migrate up`.
	ErrNotMigrated = errors.New("outbox: table not migrated")
)

// NotMigratedError says that a store's table is missing or behind, and
// how to migrate it. It matches [ErrNotMigrated] with errors.Is, and
// unwraps to the database's error when one told (a missing table's).
type NotMigratedError struct {
	// Table is the table's name, with its schema when it has one.
	Table string
	// Applied is the latest migration recorded applied to the table, 0
	// when the table does not exist.
	Applied int
	// Needed is the migration this wmoutbox needs.
	Needed int
	// Fix says how to migrate it, such as "run postgres.Migrate or
	// `wmoutbox migrate up`".
	Fix string
	// Err is the database's error, nil when a check found the table
	// behind.
	Err error
}

func (e *NotMigratedError) Error() string {
	if e.Applied == 0 {
		return fmt.Sprintf("table %s does not exist: %s", e.Table, e.Fix)
	}
	return fmt.Sprintf("table %s is at migration %d, this wmoutbox needs %d: %s", e.Table, e.Applied, e.Needed, e.Fix)
}

// Unwrap returns [ErrNotMigrated] and the database's error.
func (e *NotMigratedError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrNotMigrated}
	}
	return []error{ErrNotMigrated, e.Err}
}

// ValidationError reports why an envelope cannot be written. It matches
// [ErrInvalidEnvelope] with errors.Is. When it is returned, nothing of the
// batch was written.
type ValidationError struct {
	// Index is the envelope's position in the batch given to the writer.
	Index int
	// Field names the offending field of [Envelope], as spelled there
	// (for example "PayloadJSON" or "Headers"): the payload that is set
	// for an oversized one, PayloadJSON when neither payload is set,
	// PayloadBytes when both are.
	Field string
	// Reason says what is wrong, in words.
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("outbox: invalid envelope %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidEnvelope) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidEnvelope }

func invalidRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
}

// DuplicateKeyError says which events of a write had their topic and
// idempotency key taken, when [WriterConfig.RejectDuplicateKeys] makes
// that an error. It matches [ErrDuplicateKey] with errors.Is. When it is
// returned, nothing of the batch was written.
type DuplicateKeyError struct {
	// Events are the events whose key was taken, in the order of the
	// batch.
	Events []SkippedEvent
}

func (e *DuplicateKeyError) Error() string {
	first := e.Events[0]
	msg := fmt.Sprintf("outbox: duplicate idempotency key: envelope %d: key %q of topic %s is event %s's",
		first.Index, first.IdempotencyKey, first.Topic, first.ExistingID)
	if n := len(e.Events) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more)", n)
	}
	return msg
}

// Is makes errors.Is(err, ErrDuplicateKey) true.
func (e *DuplicateKeyError) Is(target error) bool { return target == ErrDuplicateKey }
