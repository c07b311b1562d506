// Command wmoutbox inspects and maintains the outbox table of a wmoutbox
// store, on PostgreSQL, MySQL/MariaDB or SQLite.
//
//	go install github.com/wmoutbox/wmoutbox/cmd/wmoutbox@latest
//
// # Usage
//
//	wmoutbox [global flags] <command> [subcommand] [flags]
//
// Every command takes the global flags, before or after its name:
//
//	--database-url URL  the database (default: the DATABASE_URL environment variable)
//	--schema NAME       PostgreSQL: the table's schema (default: the search_path)
//	--table NAME        the outbox table (default outbox_event)
//	--json              write JSON instead of aligned columns
//
// and -h, which prints a command's flags.
//
// # Database URLs
//
//   - postgres://user:password@host:5432/db?sslmode=disable (or
//     postgresql://): any such URL pgx reads;
//   - mysql://user:password@host:3306/db?param=value, the form goose and
//     golang-migrate take: TCP to host (port 3306 when none), the
//     parameters those of github.com/go-sql-driver/mysql's DSN
//     (golang-migrate's own, x-…, are dropped). A driver
//     DSN is taken too, after mysql:// or bare:
//     mysql://user:password@tcp(host:3306)/db or user@unix(/run/mysqld/mysqld.sock)/db.
//     The store needs no DSN parameter (its times are integers; parseTime
//     and loc do not matter);
//   - sqlite:PATH or sqlite://PATH: the database file, opened as
//     [github.com/wmoutbox/wmoutbox/outbox/sqlite.Open] opens it (created
//     if missing). Everything after the scheme is the path:
//     sqlite:///var/lib/app/app.db is the absolute path
//     /var/lib/app/app.db, sqlite:app.db a relative one.
//
// # Commands
//
//	migrate up       apply the migrations the table lacks, and list them
//	migrate status   list every migration, applied (and when) or pending
//	migrate sql      write the migrations out as SQL: --format plain (one
//	                 script, as Migrate runs it), goose or golang-migrate
//	                 (one file or pair per migration), to standard output
//	                 or into --out DIR
//
//	stats            events by topic and status with the oldest pending
//	                 age, claims in flight by owner and topic, DEAD
//	                 failure groups; --fail-if-dead N and --fail-if-oldest
//	                 DURATION exit 3 when they hold, for cron and CI
//	dead list        DEAD events matching the filter flags, a page at a
//	                 time (--limit, --after)
//	dead show ID     every column of an event, its headers and payload
//	                 (JSON indented, else a hex dump; --hide-payload)
//	dead replay      return the DEAD events matching the filter to NEW
//	dead purge       delete the DEAD events matching the filter
//	events           one aggregate's events (--aggregate-type,
//	                 --aggregate-id; --topic), every status, newest
//	                 first, a page at a time (--limit, --before)
//	purge            delete DONE (--done-older-than) and DEAD
//	                 (--dead-older-than) events by age, in batches
//	serve            the admin page at /, Prometheus gauges of the table
//	                 at /metrics, /healthz; until SIGINT or SIGTERM
//
// The filter flags of dead: --topic, --type, --aggregate-type,
// --aggregate-id, --error (the last error contains it), --group (a
// failure group of stats, or "ungrouped"), --died-after and --died-before
// (RFC 3339, or a duration ago: 24h, 7d), --id (repeatable, or
// comma-separated). dead replay and dead purge refuse an empty filter
// (--all selects every DEAD event), print with --dry-run what they would
// change and change nothing, and without --yes ask for confirmation on
// standard input; when standard input is not a terminal they refuse with
// exit code 2 instead. Durations take days (7d, 1d12h) as well as Go
// durations (36h, 90m).
//
// serve requires a bearer token (--token-env NAME) or a basic-auth
// password (--basic-auth-env NAME) read from the environment variable
// NAME, never from the command line; with neither, --read-only and a
// loopback --addr. /healthz needs no authorization.
//
// The scripts of migrate sql record themselves in the wmoutbox_migration
// table, as the dialects' Migrate does: a table migrated with goose or
// golang-migrate is one that migrate status, the store and migrate up
// (which then applies nothing) agree on. docs/migrations.md has more.
//
// Commands that read or change the outbox table refuse one that lacks a
// migration, asking for `wmoutbox migrate up`.
//
// # Exit codes
//
//	0  success
//	1  error: the database could not be reached, a statement failed, ...
//	2  usage: bad flags or arguments, or an unusable --database-url; a
//	   confirmation needed on a standard input that is not a terminal
//	3  a check found what it looks for: stats --fail-if-dead or --fail-if-oldest
package main
