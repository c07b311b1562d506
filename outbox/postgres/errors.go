package postgres

import "errors"

// ErrInvalidIdentifier is returned by [NewStore], [Migrate], [MigrateTx] and
// [Migrations] when the configured schema or table name is not a plain
// identifier (see [ValidateIdentifier]), or the table name is that of the
// migration table. Nothing touches the database then.
var ErrInvalidIdentifier = errors.New("postgres: invalid identifier")
