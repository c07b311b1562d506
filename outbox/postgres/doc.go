// Package postgres is the PostgreSQL store of the outbox, on pgx v5 (native,
// no database/sql).
//
// # Setup
//
// Create the table with [Migrate] (or [MigrateTx] in your own transaction,
// or feed [Migrations] to your migration tool), then build a [Store] on a
// pool and an [outbox.Writer] on the store:
//
//	if err := postgres.Migrate(ctx, pool, postgres.Config{}); err != nil { ... }
//	store, err := postgres.NewStore(pool, postgres.Config{})
//	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
//
// A [Store] is an [outbox.Store] for pgx.Tx: it begins transactions
// ([outbox.Store.InTx]), answers operators' queries on dead events, purges
// old rows and keeps the inbox. A relay (watermilladapter's Subscriber)
// delivers the events on the same store.
//
// # Writing events
//
// Events are written in the business transaction. [outbox.Store.InTx]
// begins it, runs your function, commits, and then runs the after-commit
// hooks: the hot path of a relay in the same process.
//
//	err := store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, `INSERT INTO orders ...`); err != nil {
//			return err
//		}
//		_, err := writer.Write(ctx, tx, outbox.NewJSON("OrderCreated", payload))
//		return err
//	})
//
// The transaction InTx begins on a pool or a connection sends its BEGIN
// with your first statement and the event with the COMMIT, so that the
// event costs the transaction no round trip of its own, and a transaction
// that writes events alone is one round trip. An event's insert error (a
// duplicate id) therefore comes from the statement after it or from the
// commit; [NewStore] says what else such a transaction does.
//
// A transaction you begin and commit yourself works too: pass its pgx.Tx to
// [outbox.Writer.Write]; delivery then falls to the relays' claims. To
// write in a savepoint of a transaction you hold, make a store on it:
// postgres.NewStore(tx, cfg), whose InTx opens a savepoint in tx.
//
// # The table
//
// One row per event (see the migrations folder). The
// payload is bytea, so that the bytes delivered are the bytes written
// (jsonb would normalise JSON); payload_json says which kind it is, and
// operators can read JSON payloads with convert_from(payload, 'UTF8')::jsonb.
// With [Config.JSONPayloadColumn], JSON payloads go to payload_doc
// instead (migration 7), of type json, which keeps the text as written,
// and SQL and change data capture read them as JSON; every read takes a
// payload from payload_doc when it holds one, whatever the configuration.
// Headers are a jsonb object. status holds [outbox.Status] codes; attempts,
// last_error, updated_at and available_at tell why a row is where it is.
//
// Three partial indexes serve the relay and operators: due rows by (topic,
// available_at, event_id) for the claim, terminal rows by (status, updated_at)
// for dead-event queries and purge, and (migration 4) the rows not yet DONE by
// aggregate, for ordered claims. Relays claim one topic at a time, which
// the due index serves in its order. Migration 5 adds error_group, the
// failure group of last_error, with two partial indexes of the DEAD rows
// (by group and death time, for [outbox.Store.DeadGroups]; by event id,
// for the dead-letter pages), and the lease table (the outbox table's name
// with _lease appended) behind [outbox.Store.Retain].
//
// DONE rows stay until [outbox.Store.Purge] deletes them, as the record of
// what was delivered and when. With [Config.DeleteDone] a delivered
// event's row is deleted instead: recording DONE then writes no second row
// version and no index entries, the table holds only pending and DEAD
// events, and delivered events are gone from [outbox.Store.Get] and from
// SQL.
//
// # Claims
//
// A relay's claim takes due rows with FOR UPDATE SKIP LOCKED and records
// it as a lease in locked_by, locked_at and locked_until, so that
// concurrent relays never take the same row while its lease runs, and a
// lease that ran out (a relay that died) is taken over. Recording an
// outcome, or handing the claim back, clears it.
//
// A claim writes no column that an index holds, and the table's fill factor
// (50, migration 2) leaves every page room for one more version of each of
// its rows: a claim is then a heap-only update, its new row version on the
// row's own page, with no index entry and only the changed bytes logged.
// Under migration 1 a claim moved available_at to the end of the lease,
// which wrote each row again elsewhere, with two index entries and the
// whole row logged. The price of the fill factor is disk: pages written
// since migration 2 hold half the rows they could, and the claim's and the
// outcome's row versions use the rest; a table that keeps DONE rows for
// long takes more space for them (docs/migrations.md says how much, and
// how to go back to fill factor 100).
//
// The due index keeps an entry for every claimed row (the row stays due
// in its place, under a lease) and, until a vacuum, for every row whose
// outcome was recorded. A drain that started every claim from the earliest
// due entry would walk over all of them, each claim of a backlog costing
// more than the one before. The relay's claims of a backlog follow a
// cursor ([outboxdriver.Position]): the index scan starts after the last
// row the previous claim took (a row comparison on (available_at,
// event_id), which the index serves), so every claim costs the same.
// Ordered claims walk the aggregate index in the same way, one aggregate
// at a time from the last one the previous claim took.
//
// # Waking relays in other processes
//
// A relay claims the events another process commits at its next poll. A
// [Notifier] in the writing process (its Notify given to the publisher's
// or the writer's Notify) and a [Listener] in each relay ([Listen],
// usually waking a Subscriber) make that immediate. The notifier sends
// pg_notify after the business commit, from a short transaction of its
// own that does not wait for the disk: PostgreSQL serialises the commits
// of transactions that notified on one lock for the whole server, which
// no business transaction then takes. A lost notification (a failed send,
// a listener reconnecting) costs a poll interval, never an event. Both
// sides must name the table alike ([Channel]).
//
// # Log feed
//
// A [LogFeed] ([NewLogFeed]) streams the events the database commits,
// in commit order, from PostgreSQL's write-ahead log rather than from
// claims: it is the [outboxdriver.Feed] a relay in log mode reads
// (watermilladapter's SubscriberConfig.Feed). It reads a logical
// replication slot through the pgoutput plugin and a publication of the
// table's inserts, both named from [LogFeedConfig] (by default the
// table's name with _relay and _log appended), and creates them when
// they are missing.
//
// What it needs of the server:
//
//   - wal_level = logical, which takes a restart; Stream returns
//     [ErrLogicalDecodingOff] otherwise. max_replication_slots must leave
//     room for the slot, and max_wal_senders for every feed: a replication
//     connection is a WAL sender, a standby's too.
//   - A role with the REPLICATION attribute (ALTER ROLE ... REPLICATION),
//     or a superuser, for the connection. Creating the publication also
//     takes the CREATE privilege on the database and ownership of the
//     table; create it beforehand (CREATE PUBLICATION <table>_log FOR TABLE
//     <table> WITH (publish = 'insert')) to run the feed without them.
//   - A connection to the server itself, not through a pooler in
//     transaction mode: a replication session is a session of its own.
//
// What a slot costs: the server keeps every WAL segment from the slot's
// confirmed position on, for as long as the slot exists, read or not. The
// feed confirms a position once the events before it are settled, every
// StatusInterval, and follows the server's position when nothing is
// pending, so a slot that is read holds back seconds of WAL. A slot
// nobody reads holds back WAL until the disk fills: drop the slot of a
// relay you retire (SELECT pg_drop_replication_slot('<slot>')), watch its
// lag (pg_replication_slots, or `wmoutbox stats`), and set
// max_slot_wal_keep_size to bound what a forgotten slot can keep. The
// server then invalidates a slot that falls further behind; the feed
// drops it and creates it again.
//
// A slot has one reader at a time. Any number of feeds may name the same
// slot: one reads it (Reading(true)) and the others stand by, trying again
// every StandbyRetry, so that one of them takes over within about that
// long after the reader's connection drops (the server frees the slot
// when it does, and at once when the process is killed). A feed that
// loses its connection reconnects, 100 ms later doubling up to 5 s, and
// resumes where the slot stands.
//
// The slot is the position of the delivery: a transaction is confirmed
// once every event of it and of every transaction before it is settled,
// so a feed that starts again (a crash, a restart, another reader) hands
// over again the transactions from the first one not settled; events
// are delivered at least once, as by claims. When the feed creates the
// slot (first start, or after it was dropped or invalidated), the events
// committed before its creation are not in its stream: the feed tells the
// relay (FeedHandler.Covered) that the pending events created before then
// are the claims' to take. It tells that too as the stream moves on,
// CoveredDelay (30 s) behind the last commit it streamed, so that events
// the relay left to the table are claimed in time.
//
// Every StatusInterval the reading feed records its progress in the lease
// table: the row named "slot:" followed by the slot's name, owner the
// feed's Reader, until the time its confirmed position last moved (see
// [outboxdriver.SlotLeasePrefix]).
//
// # Names and safety
//
// Schema and table names are validated ([ValidateIdentifier]) and quoted;
// every value is a bind parameter. A [Store] is safe for concurrent use.
// Every statement on the outbox table is in sql.go and the migrations
// folder.
package postgres
