package sqlite

import "errors"

var (
	// ErrInvalidIdentifier is returned by [NewStore], [Migrate], [MigrateTx]
	// and [Migrations] when the configured table name is not a plain
	// identifier: 1 to 48 characters of a-z, 0-9 and _, not starting with a
	// digit, sqlite_ or pg_ (the rule of every wmoutbox dialect), or is
	// wmoutbox_migration, the migration table's. Nothing touches the
	// database then.
	ErrInvalidIdentifier = errors.New("sqlite: invalid identifier")

	// ErrBusy is returned by a write of the store (a relay's claim or
	// outcome, [outbox.Store.InTx], [outbox.Store.ReplayDead],
	// [outbox.Store.Purge]...) that waited [BusyTimeout] for the other
	// writers of this process on the same *sql.DB: the same condition as
	// SQLite's own SQLITE_BUSY, which comes back as the driver's error
	// when another process holds the lock. A store write made inside
	// [outbox.Store.InTx]'s function, on the store's database, always ends
	// so: the transaction is the one writer until it commits.
	ErrBusy = errors.New("sqlite: database busy")
)
