// Package faults holds the fault-injection suite of wmoutbox: tests that
// break real components while events are being written and relayed, and
// then check that nothing was lost. It has no API; everything is in test
// files built only with the faults build tag, because the tests are slow
// and disruptive (they kill processes, cut database and broker
// connections, and stop a Kafka broker for 30 seconds).
//
//	make faults   # in faults/: go test -tags faults -race -count=1 -v ./..., then "N passed, N failed"
//
// The suite is a module of its own (faults/go.mod, which replaces
// github.com/wmoutbox/wmoutbox with ..), so that what only it needs, such
// as Sarama's client for reading offsets, stays out of the library's
// go.mod. It imports the test harnesses under internal/, which Go allows
// because its path lies under the library's.
//
// The suite needs what the other tests need: PostgreSQL
// (TEST_DATABASE_URL, default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable) where the
// user may create databases (it then owns them, so it may refuse their connections
// and terminate their backends), and RabbitMQ on 127.0.0.1:5672
// (TEST_AMQP_URL) with rabbitmqctl on the PATH; the MySQL scenarios need
// MariaDB 10.6+ or MySQL (TEST_MYSQL_DSN, default
// root@tcp(127.0.0.1:3306)/, see internal/testmysql) where the user may
// create databases. The log relay scenarios need wal_level = logical
// (scripts/pg-logical), and the two that restart the server need it to be
// this machine's cluster, managed by Debian's pg_ctlcluster. Kafka runs in
// process (kfake). Without a server the tests skip, except under CI=true,
// where they fail.
//
// # The ledger
//
// Every scenario keeps a ledger in its test database, beside the outbox
// table. The writers insert each event id into it in the very transaction
// that writes the event, so the ledger holds exactly the ids of committed
// transactions, whatever the fault did to the commit; transactions rolled
// back on purpose are noted apart. Handlers record each delivery (in
// the test database when the handler runs in another process, in memory
// otherwise); forwarding scenarios read what reached the broker with an
// independent client. The check then counts:
//
//   - lost: committed ids never delivered; must be 0;
//   - phantom: delivered ids that no committed transaction wrote (rolled
//     back on purpose, or never written); must be 0;
//   - duplicates: deliveries beyond the first of an id; 0 where nothing
//     crashed, and bounded by the events in flight at each crash otherwise.
//
// Each scenario also requires every outbox row to end DONE (or DEAD where
// the scenario expects it) with no claim left, and logs one line of
// figures, which faults/README.md collects:
//
//	ledger: scenario=crash runs=1 faults=20 events=N lost=0 duplicates=D phantom=0 ...
//
// # Scenarios
//
//   - crash: relays in separate OS processes (this test binary run again
//     in a child role); one is killed with SIGKILL 20 times mid-batch
//     while writers write, the other takes over the dead one's claims when
//     their leases end.
//   - dbrestart: every backend of the test database is terminated
//     (pg_terminate_backend) again and again under load; writers retry,
//     the relay reconnects on its own.
//   - kafka, amqp: the Kafka broker (kfake) is stopped for 30 s and
//     started again on the same port and data; the relay's RabbitMQ
//     connection is closed by the broker (rabbitmqctl) several times.
//   - poison: one event that always fails among 10,000 good ones.
//   - relays: four relays on one table, nothing failing: no duplicates.
//   - ordered relays: four ordered relays (SubscriberConfig.Ordered), three
//     in this process and one child process killed with SIGKILL five
//     times, on events of 50 aggregates, each numbered in its aggregate;
//     handlers fail a tenth of first deliveries (RETRY) and defer a
//     twentieth (RetryAfter). Besides the ledger, the times of the
//     deliveries (one clock for the host's processes) are checked: the
//     first delivery of each event starts after an Ack of the event
//     before it in its aggregate (order_violations), and no two events of
//     an aggregate are in handlers at the same time (concurrent), unless
//     the earlier one had been acked by another delivery before the later
//     one started, so that the overlapping one is a redelivery of an
//     event already handled (concurrent_excused).
//   - log relay (relays in log mode, as child processes, on a replication
//     slot of their test's own): the slot's reader killed with SIGKILL ten
//     times while a standby waits (log-kill: the takeover time, and each
//     event delivered again only as often as it was in flight at a kill);
//     the slot dropped under the reader three times (log-slot-dropped: the
//     events committed meanwhile are claimed from the table); and the
//     server restarted, then crashed (log-server-restart,
//     log-server-crash, not parallel: they restart the machine's
//     PostgreSQL with pg_ctlcluster).
//   - slow: a handler ten times slower than the writers; the relay's heap
//     does not grow with the backlog, which drains afterwards.
//   - bad input: invalid envelopes, bad table names, rows with malformed
//     headers, messages published without a transaction.
//
// The MySQL store (outbox/mysql, on MariaDB) has its own ledger tables in
// its test database, and runs the scenarios where it differs from
// PostgreSQL:
//
//   - crash-mysql: the crash scenario with 8 kills; MySQL has no
//     LISTEN/NOTIFY, so both relays find the writers' events by polling
//     every 50 ms.
//   - bad input on MySQL: invalid envelopes and messages, and batches the
//     database refuses in their second statement (a batch is split at
//     1,000 rows or 4 MiB, and the store deletes what the first wrote),
//     hot-path events of a savepoint that rolls back; bad table names
//     (backquotes, other databases' names, 49 characters); malformed
//     stored headers, raw NUL bytes among them; writes without a
//     transaction or in a finished one.
//   - deadlocked write on MySQL: a write that InnoDB picks as a
//     deadlock's victim, which rolls back the whole transaction, in a
//     business transaction that goes on: nothing of it may commit, and
//     its end may not report success.
package faults
