// Package testdb gives each test its own PostgreSQL database, cloned from a
// template that holds the migrated wmoutbox schema. Tests only: it creates
// and drops databases.
//
//	pool := testdb.New(t) // *pgxpool.Pool on a fresh database
//	url := testdb.URL(t)  // or just the connection URL
//
// # Server
//
// The server is TEST_DATABASE_URL, by default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable. DATABASE_URL
// is never read. The user must be allowed to create databases. When no server
// answers, tests skip with a message naming TEST_DATABASE_URL; under CI=true
// they fail instead.
//
// # Template
//
// The template is named wmoutbox_tmpl_<hash>, the hash covering the rendered
// migrations, so a schema change builds a new one. Each process builds it at
// most once, holding a session advisory lock, because the test binaries of
// several packages run at the same time. It is built under a temporary name,
// migrated, marked as a template that takes no connections, and only then
// renamed: a crash mid-build never leaves a half template behind. Older
// wmoutbox_tmpl_* databases are dropped while the lock is held; a process whose
// template another checkout dropped builds its own again.
//
// No connection to the template is ever kept open: PostgreSQL refuses to
// clone a database that has sessions. A clone that still hits one (an
// autovacuum worker, say) is retried after a short backoff.
//
// # Test databases
//
// Each test database is wmoutbox_test_<pid>_<n>, created with CREATE DATABASE
// ... TEMPLATE. At the test's cleanup it is reset to the template's state
// and handed to the next test of the process, which costs the server less
// than a drop and a clone: the sessions left on it are ended, every
// schema, large object, database setting, publication and replication
// slot no session holds goes, and the migrations run again. One that
// cannot be reset, or beyond 8 idle ones, is dropped WITH (FORCE). A
// process holds at most 8 databases in tests at once (a test
// asking for a ninth waits for a slot), which keeps parallel tests under
// max_connections; [New]'s pools hold at most 4 connections each. Idle
// databases go when the process does, with the next sweep.
//
// Once per process, under the same lock, databases of processes that died
// without cleaning up are swept: wmoutbox_test_<pid>_* whose pid is no live
// process on this machine. Processes on other machines sharing the server
// are not told apart, so give each machine its own server.
//
// A failure of this setup (template build, sweep) is reported to every test
// that asks for a database, not only the first.
//
// # Logical decoding
//
// Tests of logical replication call [RequireLogicalDecoding] first: it
// skips them unless the server runs with wal_level = logical (failing them
// under CI=true), naming scripts/pg-logical, which sets it.
package testdb
