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

	// ErrMigrationLocked is returned by [Migrate] when another migrator
	// held the migration lock of the table for [MigrateLockTimeout].
	ErrMigrationLocked = errors.New("mysql: another process is migrating the table")
)
