package mysql

import "errors"

var (
	// ErrInvalidIdentifier is returned by [NewStore], [Migrate] and
	// [Migrations] when the configured table name is not a plain
	// identifier: 1 to 48 characters of a-z, 0-9 and _, not starting with a
	// digit, sqlite_ or pg_ (the rule of every wmoutbox dialect), or is
	// wmoutbox_migration, the migration table's. Nothing touches the
	// database then.
	ErrInvalidIdentifier = errors.New("mysql: invalid identifier")

	// ErrTransactionRolledBack wraps the error of a write of the store in
	// a business transaction (an [outbox.Writer]'s insert, the look-up of
	// its hot events before the commit, [outbox.Store.MarkProcessed]) with
	// which MySQL rolled back the whole transaction: a deadlock (1213), or
	// a lock wait timeout (1205) when innodb_rollback_on_timeout is set
	// (otherwise MySQL rolls back the statement alone, and the error is
	// returned as it is). The session's next statements would commit one
	// by one, outside any transaction: the store ends the *sql.Tx as well,
	// so that they fail with sql.ErrTxDone (its Commit too), its own later
	// writes in that transaction return this error, and
	// [outbox.Store.InTx] returns it instead of committing. Run the whole
	// transaction again.
	ErrTransactionRolledBack = errors.New("mysql: the transaction was rolled back by the server; run it again")

	// ErrMigrationLocked is returned by [Migrate] when another migrator
	// held the migration lock of the table for [MigrateLockTimeout].
	ErrMigrationLocked = errors.New("mysql: another process is migrating the table")
)
