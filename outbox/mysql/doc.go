// Package mysql is the MySQL-family store of the outbox, through
// database/sql and github.com/go-sql-driver/mysql, on InnoDB: for MariaDB
// 10.6 or later, where its tests run (10.11: the stores' conformance suite
// and Watermill's universal Pub/Sub suite among them), and written to
// MySQL 8.0's syntax too, which no test has run against yet. Its [Store]
// is an [outbox.Store] for *sql.Tx and behaves as the PostgreSQL one
// ([github.com/wmoutbox/wmoutbox/outbox/postgres]) does, call for call;
// what differs is described below.
//
// # Setup
//
// Open the database with the driver (this package imports it, which
// registers it as "mysql"), create the tables with [Migrate] (or feed
// [Migrations] to your migration tool), then build a [Store] and an
// [outbox.Writer] on it:
//
//	db, err := sql.Open("mysql", "app:secret@tcp(db:3306)/shop?interpolateParams=true")
//	if err := mysql.Migrate(ctx, db, mysql.Config{}); err != nil { ... }
//	store, err := mysql.NewStore(db, mysql.Config{})
//	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
//
// With interpolateParams=true the driver sends a statement with its values
// in one round trip, where it otherwise prepares it first: a business
// transaction that writes one event is markedly faster, with or without a
// hot path (BenchmarkWrite measures it; the bench report, bench/README.md,
// has the numbers). The store needs no other DSN setting: its times are
// integers, so parseTime and loc do not matter.
//
// # Writing events
//
// Events are written in the business transaction. [outbox.Store.InTx]
// begins it, at the server's isolation level, runs your function,
// commits, and then runs the after-commit hooks: the hot path of a relay
// in the same process.
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
// batch is written whole or not at all: in one statement for up to 1,000
// events and 4 MiB, and beyond that in several, whose rows are deleted
// again when a later one fails. After a failed write the transaction goes
// on, as a MySQL transaction does after a statement the server rolled back
// alone (a duplicate id, a lock wait timeout), except after a deadlock (or
// a lock wait timeout with innodb_rollback_on_timeout set), with which
// InnoDB rolls back the whole transaction: the session's next statements
// would then commit one by one. The write returns
// [ErrTransactionRolledBack] and the store ends the *sql.Tx too, so that
// the statements after it fail with sql.ErrTxDone rather than commit
// alone, and InTx returns the error instead of committing. Run the whole
// transaction again.
//
// MySQL cannot tell whether a savepoint holds a write, so a write with hot
// events costs one more query before its commit, which asks which of its
// events are still there.
//
// # The table
//
// One InnoDB table (see the migrations folder) with the columns of the
// PostgreSQL table, and seq, an AUTO_INCREMENT primary key that numbers
// the events in write order. Event ids, topics, types, aggregate and
// tenant ids and owners are VARBINARY: compared byte for byte, as
// PostgreSQL compares them, where MySQL's _bin collations ignore trailing
// spaces. Read them as text with CAST(topic AS CHAR). The payload is a
// MEDIUMBLOB delivered byte for byte as written, with payload_json saying
// which kind it is; headers are a JSON object in a text column; times are
// BIGINT unix microseconds in UTC (read them with
// FROM_UNIXTIME(created_at / 1000000)). status holds [outbox.Status]
// codes; attempts, last_error, updated_at and available_at tell why a row
// is where it is.
//
// MySQL has no partial indexes. The due index leads with pending, a
// stored generated column that is 1 for NEW and RETRY rows, so that a
// claim reads the due rows of a topic in due order and no others. The
// finished index, (status, updated_at), serves dead-event queries and
// purge. The aggregate index serves ordered claims.
//
// # Claims
//
// A relay (watermilladapter's Subscriber) claims the due events of one
// topic at a time, in one READ COMMITTED transaction: SELECT ... FOR
// UPDATE SKIP LOCKED reads the topic's due rows in due order through the
// due index, stops at the claim's limit and locks only the rows it takes,
// passing over those other claims hold; an UPDATE then records the lease
// in locked_by, locked_at and locked_until, as in the PostgreSQL store.
// READ COMMITTED locks no gap of the due index, which would hold back
// writers' inserts until the claim commits. An unordered claim starts
// after the last row of the relay's previous one: InnoDB keeps the due
// index entries of the rows in flight, and of finished rows until it
// purges them, and a claim from the start of the topic passes over all of
// them.
//
// An ordered claim takes an event only when no earlier event of its
// aggregate is NEW, RETRY or DEAD: three probes of the aggregate index,
// each reading one entry, whatever the aggregate's DONE history. Like the
// SQLite store, and unlike the PostgreSQL one, it goes in due order and
// passes over the events waiting behind the first of their aggregate, so
// that its cost grows with the length of the aggregates' queues (MariaDB's
// subquery cache answers the probes of one aggregate once; the bench
// report has figures). Keep aggregates' queues short, or use PostgreSQL,
// where a claim walks the aggregates instead.
//
// Outcomes, releases and deletions of a batch are one statement each,
// which joins the batch's ids (a JSON array) to the table one index lookup
// at a time: the join order is forced, since on a small table MySQL would
// rather read every row, and an UPDATE locks each row it reads. A claim
// records its lease by primary key: by the event id index, it would queue
// behind an outcome that holds the entry and waits for the claimed row.
// Purges lock their batch with SKIP LOCKED, in READ COMMITTED, as claims
// do: they pass over rows other transactions hold.
//
// No LISTEN/NOTIFY: relays learn of new rows from the hot path or by
// polling; a relay in another process claims what a writer commits at its
// next poll.
//
// # Migrations
//
// MySQL commits each DDL statement on its own: [Migrate] cannot apply
// migrations in a transaction. Migrators of one table take turns on a
// named lock (GET_LOCK), each migration is recorded in wmoutbox_migration
// once applied, and its statements can run again, so that one cut short
// is applied again from its start.
//
// # Names and safety
//
// The table name is validated (1 to 48 characters of a-z, 0-9 and _, not
// starting with a digit, sqlite_ or pg_, the rule of every wmoutbox
// dialect) and quoted; every value is a bind parameter. The tables live in
// the database of db's connections. A [Store] is safe for concurrent use.
// Every statement on the outbox table is in sql.go and the migrations
// folder.
package mysql
