package postgres

import "errors"

// ErrInvalidIdentifier is returned by [NewStore], [Migrate], [MigrateTx] and
// [Migrations] when the configured schema or table name is not a plain
// identifier (see [ValidateIdentifier]), or the table name is that of the
// migration table, and by [NewLogFeed] for such a slot or publication
// name. Nothing touches the database then.
var ErrInvalidIdentifier = errors.New("postgres: invalid identifier")

// ErrLogicalDecodingOff is returned by [LogFeed.Stream] when the server's
// wal_level is not logical: it keeps no log a slot can read. Set
// wal_level = logical in postgresql.conf (or ALTER SYSTEM SET wal_level =
// logical) and restart the server; a reload is not enough.
var ErrLogicalDecodingOff = errors.New("postgres: logical decoding is off")

// ErrLogFeedConflict is returned by [LogFeed.Stream] when the slot or the
// publication its config names exists in a form the feed cannot read: a
// slot of another database, of another output plugin than pgoutput, or a
// physical one; a publication that does not publish the inserts of the
// outbox table. The feed changes neither: drop it, or name another.
var ErrLogFeedConflict = errors.New("postgres: log feed conflict")
