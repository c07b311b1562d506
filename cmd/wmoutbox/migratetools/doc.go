// Package migratetools has no API: its tests apply the migrations that
// `wmoutbox migrate sql` writes for goose (github.com/pressly/goose/v3)
// and golang-migrate (github.com/golang-migrate/migrate/v4) with those
// tools, on PostgreSQL, MariaDB and SQLite, and check that the result is
// the schema the dialects' Migrate makes: every migration recorded where
// AppliedMigrations reads it, Migrate then a no-op, a store that writes
// and reads events; and that the down migrations take it all away again.
//
// It is a module of its own, so that goose and golang-migrate (with the
// drivers behind them) stay out of the library's go.mod. Its tests need
// the servers of internal/testdb (TEST_DATABASE_URL) and
// internal/testmysql (TEST_MYSQL_DSN); they skip without them, and fail
// under CI=true. Run them from this directory, or with make test from the
// repository root:
//
//	go test -race ./...
package migratetools
