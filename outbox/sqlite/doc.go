// Package sqlite is the embedded store of the outbox: SQLite through
// database/sql and modernc.org/sqlite (pure Go, no cgo), for programs and
// demos that need no database server. Its [Store] is an [outbox.Store]
// for *sql.Tx and behaves as the PostgreSQL one
// ([github.com/wmoutbox/wmoutbox/outbox/postgres]) does, call for call;
// what differs is what SQLite can do at once, described below.
//
// # Setup
//
// Open the database with [Open] (or with the settings it documents), create
// the table with [Migrate] (or [MigrateTx], or feed [Migrations] to your
// migration tool), then build a [Store] and an [outbox.Writer] on it:
//
//	db, err := sqlite.Open(ctx, "app.db") // or sqlite.Memory
//	if err := sqlite.Migrate(ctx, db, sqlite.Config{}); err != nil { ... }
//	store, err := sqlite.NewStore(db, sqlite.Config{})
//	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
//
// # Writing events
//
// Events are written in the business transaction. [outbox.Store.InTx]
// begins it, runs your function, commits, and then runs the after-commit
// hooks: the hot path of a relay in the same process.
//
//	err := store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
//		if _, err := tx.ExecContext(ctx, `INSERT INTO orders ...`); err != nil {
//			return err
//		}
//		_, err := writer.Write(ctx, tx, outbox.NewJSON("OrderCreated", payload))
//		return err
//	})
//
// A transaction you begin and commit yourself works too: pass its *sql.Tx
// to [outbox.Writer.Write]; delivery then falls to the relays' claims. A
// batch is written whole or not at all: a failed row (a duplicate id, say)
// undoes the rows of its batch written before it, and the transaction
// stays usable, as SQLite transactions do after a failed statement.
//
// # The table
//
// One STRICT table (see the migrations folder), the columns of the
// PostgreSQL table with SQLite types: the payload is a BLOB, delivered
// byte for byte as written, with payload_json saying which kind it is; headers are a JSON object in TEXT; times are INTEGER unix
// microseconds in UTC, so comparisons and ordering are exact (read them
// with datetime(col / 1e6, 'unixepoch', 'subsec')). status holds
// [outbox.Status] codes; attempts, last_error, updated_at and available_at
// tell why a row is where it is. The same three partial indexes serve the
// relay (due rows by topic; the rows not yet DONE by aggregate, for
// ordered claims) and operators (terminal rows by age).
//
// # What SQLite does not give you
//
// One writer at a time. SQLite locks the whole database for writing: every
// insert, claim and status update waits for the write lock, and a business
// transaction holds it from its first write (from BEGIN, on a database from
// [Open]) to its commit. Keep transactions short. With WAL, readers never
// wait for the writer.
//
// No FOR UPDATE SKIP LOCKED, and no need for it. A relay (watermilladapter's
// Subscriber) claims the due events of one topic at a time, in one
// statement,
//
//	UPDATE ... SET locked_by = ?, locked_at = ?, locked_until = ?
//	WHERE event_id IN (SELECT ... ORDER BY available_at, event_id LIMIT ?)
//	RETURNING ...
//
// and a write statement takes the write lock before it reads anything, so
// claimers run one after the other and each sees the claims of those
// before it; this holds in a deferred transaction too, so it does not
// depend on the DSN. The lease is the PostgreSQL store's: locked_by,
// locked_at and locked_until record who claimed the rows, when, and until
// when; they are due for nobody until the lease runs out (a relay that
// died loses them then); a relay that stops releases its claims, which
// makes the events due at once, in their place; outcomes clear the claim.
// The lease ends when the relay that asked for it expects: it is counted
// from the moment the relay claimed, so a claim that waited for other
// writers (below) holds its rows that much less, at most [BusyTimeout].
// An ordered claim takes an event only when no earlier event of its
// aggregate is NEW, RETRY or DEAD; like the MySQL store, and unlike the
// PostgreSQL one, it goes in due order and passes over the events waiting
// behind the first of their aggregate: keep aggregates' queues short.
//
// No fair lock queue. A connection that finds the write lock taken polls
// for it with growing sleeps until the busy timeout, and a writer that
// takes the lock again and again (a relay draining a backlog) can win
// every poll of another until that one fails with SQLITE_BUSY. So within a
// process the stores queue the writers of each *sql.DB themselves, first
// come first served: the relays' claims, outcomes and releases,
// [outbox.Store.ReplayDead], [outbox.Store.Purge],
// [outbox.Store.PurgeProcessed], [Migrate] and the transactions of
// [outbox.Store.InTx]. A writer that waits longer than [BusyTimeout] in
// that queue fails with [ErrBusy]. Writes that bypass the queue (a
// transaction you begin with db.BeginTx, another process) meet SQLite's
// busy timeout instead; give business transactions to
// [outbox.Store.InTx] when relays run in the same process.
//
// No LISTEN/NOTIFY: relays learn of new rows from the hot path or by
// polling.
//
// # Connections
//
// [Open] sets what the store needs: IMMEDIATE read-write transactions
// (_txlock=immediate), a busy timeout, and WAL. If you open the database
// yourself, use the same DSN parameters, for example
//
//	file:app.db?_busy_timeout=5000&_txlock=immediate&_journal_mode=WAL
//
// foreign_keys does not matter to the store (its table has none), nor does
// synchronous: the default (FULL) makes a commit durable when it returns;
// NORMAL is faster and, with WAL, may lose the last commits (business rows
// and events alike) on power loss, never one without the other.
//
// Without _txlock=immediate, a business transaction that reads before it
// writes can fail with SQLITE_BUSY when another process wrote in between
// (SQLite refuses to upgrade a read lock that a commit made stale). The
// store's own operations do not depend on it: each is one statement, a
// transaction whose first statement writes, or ([Migrate]) an explicit
// BEGIN IMMEDIATE.
//
// Several connections are right: readers run in parallel with the writer.
// db.SetMaxOpenConns(1) is not needed for the store; if you set it, a
// query made while a transaction is open on the same *sql.DB (a store call
// inside [outbox.Store.InTx], say) waits for the one connection, which
// never comes back: a deadlock until the context ends. A store write
// inside InTx's function cannot succeed in any case (the transaction is
// the writer until it commits): write through its tx, or after commit.
//
// Plain ":memory:" gives each connection its own empty database; [Open]
// handles [Memory] with one in-memory database per call, shared by all
// connections of the returned *sql.DB.
//
// # Names and safety
//
// The table name is validated (1 to 48 characters of a-z, 0-9 and _, not
// starting with a digit, sqlite_ or pg_, the rule of every wmoutbox
// dialect) and quoted; every value is a bind parameter. A [Store] is safe
// for concurrent use. Every statement on the outbox table is in sql.go and
// the migrations folder.
package sqlite
