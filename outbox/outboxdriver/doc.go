// Package outboxdriver is the contract between the outbox engine and a
// store dialect: what a store for another database implements. Applications
// do not need it; they use package outbox and a dialect's constructor
// (outbox/postgres, outbox/mysql, outbox/sqlite).
//
// The API is not stable before v1: methods and parameters may change in
// any release. Implement it in this module, where the conformance suite
// (internal/storetest) checks a driver against the others.
//
// # Division of labour
//
// The engine decides; the driver runs statements. The engine (the
// [github.com/wmoutbox/wmoutbox/outbox.Store] and the relay in
// watermilladapter) validates every request, fills in defaults, reads the
// clock, encodes headers, splits a batch of outcomes into its DONE ids and
// the rest, sorts what a claim returns and keeps the claim cursor, and
// loops over purge batches. It calls the driver once per statement (or
// per short transaction) with prepared parameters: a ...Params struct in,
// rows or counts out. A driver never calls back into the engine and reads
// no clock: every time it writes or compares comes in the parameters.
//
// # The table
//
// A driver stores one row per event with these columns (names are the
// PostgreSQL ones; see its migrations): event_id (unique), event_type,
// topic, aggregate_type, aggregate_id and tenant_id (NULL for none),
// payload (bytes, as given), payload_json, headers (a JSON object of
// strings, NULL for none), status, attempts, occurred_at, available_at,
// created_at, updated_at, done_at, last_error, locked_by, locked_at,
// locked_until and error_group (NULL for none). A second table holds the
// named leases of [Executor.AcquireLease]: name, owner and until. Status codes: 0 NEW, 1 DONE, 2 RETRY, 3 DEAD. Times are
// kept to the microsecond; a driver returns them in UTC or with their
// zone, the engine does not care which.
//
// A row is due when it is NEW or RETRY, available_at has come, and no
// lease runs on it (locked_until is NULL or has come). Rows written by a
// version before locked_until existed have a claim whose lease end is
// available_at: a driver whose table ever had such rows treats a row with
// locked_by set and locked_until NULL as leased until available_at.
//
// # Errors
//
// Return errors from the database wrapped, naming the operation. An insert
// that meets an event id already in the table returns an error that
// matches [github.com/wmoutbox/wmoutbox/outbox.ErrDuplicateEvent] (wrap
// both). Nothing else needs a sentinel: the engine validated the request
// before it reached the driver.
//
// # Concurrency
//
// A driver is safe for concurrent use. Each [Executor] method runs in a
// transaction of its own, short, outside any business transaction, unless
// the driver's database is a transaction (a pgx.Tx), in which case every
// statement runs in it.
package outboxdriver
