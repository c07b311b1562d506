package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/wmoutbox/wmoutbox/internal/migrationfiles"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/internal/testmysql"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// result is what a run of the command left.
type result struct {
	code           int
	stdout, stderr string
}

// wmoutbox runs the command line args in process, with env as its
// environment.
func wmoutbox(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), args, func(k string) string { return env[k] }, strings.NewReader(""), &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// ok runs args and requires exit code 0.
func ok(t *testing.T, args ...string) string {
	t.Helper()
	r := wmoutbox(t, nil, args...)
	require.Equalf(t, exitOK, r.code, "wmoutbox %s: stderr %s", strings.Join(args, " "), r.stderr)
	return r.stdout
}

// dialects are the dialects with a function making the URL of an empty
// database.
var dialects = []struct {
	name  string
	empty func(t *testing.T) string
	count int // migrations
}{
	{dialectPostgres, func(t *testing.T) string { return testdb.EmptyURL(t) }, countOf(postgres.Migrations(postgres.Config{}))},
	{dialectMySQL, func(t *testing.T) string { return "mysql://" + testmysql.EmptyDSN(t) }, countOf(mysql.Migrations(mysql.Config{}))},
	{dialectSQLite, func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "outbox.db") }, countOf(sqlite.Migrations(sqlite.Config{}))},
}

func countOf(migrations []migrationfiles.Migration, err error) int {
	if err != nil {
		panic(err)
	}
	return len(migrations)
}

type statusJSON struct {
	Dialect    string `json:"dialect"`
	Table      string `json:"table"`
	Version    int    `json:"version"`
	Latest     int    `json:"latest"`
	Migrations []struct {
		Version   int     `json:"version"`
		Name      string  `json:"name"`
		Applied   bool    `json:"applied"`
		AppliedAt *string `json:"applied_at"`
	} `json:"migrations"`
}

type upJSON struct {
	Dialect string `json:"dialect"`
	Table   string `json:"table"`
	Applied []struct {
		Version int    `json:"version"`
		Name    string `json:"name"`
	} `json:"applied"`
	Version int `json:"version"`
}

func TestMigrateUpAndStatus(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			url := d.empty(t)
			n := strconv.Itoa(d.count)

			out := ok(t, "migrate", "status", "--database-url", url)
			require.Contains(t, out, "outbox_event ("+d.name+") is at migration 0 of "+n+".")
			require.Equal(t, d.count, strings.Count(out, " pending"), out)

			// A command on the outbox table refuses it.
			c := &cli{getenv: func(string) string { return "" }, globals: globals{databaseURL: url, table: defaultTable}}
			_, err := c.openMigrated(t.Context())
			require.ErrorIs(t, err, errNotMigrated)
			require.ErrorContains(t, err, "table outbox_event has no wmoutbox migrations: run `wmoutbox migrate up`")

			// Global flags before the command, --json after it.
			var up upJSON
			require.NoError(t, json.Unmarshal([]byte(ok(t, "--database-url", url, "migrate", "up", "--json")), &up))
			require.Equal(t, d.name, up.Dialect)
			require.Equal(t, "outbox_event", up.Table)
			require.Len(t, up.Applied, d.count)
			require.Equal(t, d.count, up.Version)
			for i, m := range up.Applied {
				require.Equal(t, i+1, m.Version)
				require.True(t, strings.HasPrefix(m.Name, "000"+strconv.Itoa(i+1)+"_"), m.Name)
			}

			out = ok(t, "migrate", "up", "--database-url", url)
			require.Equal(t, "outbox_event is up to date, at migration "+n+".\n", out)

			out = ok(t, "migrate", "status", "--database-url", url)
			require.Contains(t, out, "is at migration "+n+" of "+n+".")
			require.Equal(t, d.count, strings.Count(out, " applied "), out)
			require.Contains(t, out, "VERSION  NAME")

			var status statusJSON
			require.NoError(t, json.Unmarshal([]byte(ok(t, "migrate", "status", "--json", "--database-url", url)), &status))
			require.Equal(t, d.count, status.Version)
			require.Equal(t, d.count, status.Latest)
			require.Len(t, status.Migrations, d.count)
			for _, m := range status.Migrations {
				require.True(t, m.Applied)
				require.NotNil(t, m.AppliedAt)
			}

			db, err := c.openMigrated(t.Context())
			require.NoError(t, err)
			db.close()

			// Another table in the same database is another story.
			out = ok(t, "migrate", "status", "--database-url", url, "--table", "other_outbox")
			require.Contains(t, out, "other_outbox ("+d.name+") is at migration 0 of "+n+".")
		})
	}
}

func TestMigrateUpPrintsWhatItApplied(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + filepath.Join(t.TempDir(), "outbox.db")
	latest := countOf(sqlite.Migrations(sqlite.Config{}))
	out := ok(t, "migrate", "up", "--database-url", url)
	require.Contains(t, out, fmt.Sprintf("Applied %d migrations to outbox_event (sqlite), now at migration %[1]d:\n\nVERSION  NAME\n1        0001_create_outbox_event.sql\n", latest))

	// A table short of its last migration.
	db, err := sqlite.Open(t.Context(), strings.TrimPrefix(url, "sqlite:"))
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(t.Context(), `DELETE FROM wmoutbox_migration WHERE version = ?`, latest)
	require.NoError(t, err)
	c := &cli{getenv: func(string) string { return "" }, globals: globals{databaseURL: url, table: defaultTable}}
	_, err = c.openMigrated(t.Context())
	require.ErrorContains(t, err, fmt.Sprintf("table outbox_event is at migration %d of %d: run `wmoutbox migrate up`", latest-1, latest))

	// One beyond what this wmoutbox knows.
	_, err = db.ExecContext(t.Context(), `INSERT INTO wmoutbox_migration VALUES ('outbox_event', ?, 'x', 0), ('outbox_event', 99, '0099_future.sql', 0)`, latest)
	require.NoError(t, err)
	_, err = c.openMigrated(t.Context())
	require.ErrorContains(t, err, fmt.Sprintf("table outbox_event is at migration 99, which this wmoutbox does not know (it knows %d)", latest))
	out = ok(t, "migrate", "status", "--database-url", url)
	require.Regexp(t, `\n99 +0099_future\.sql +applied, unknown to this wmoutbox +1970-01-01T00:00:00Z\n`, out)
}

// TestPlainSQLMigrates runs the plain script of each dialect on an empty
// database: migrate status then finds every migration applied, and
// migrate up has nothing left to do.
func TestPlainSQLMigrates(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			url := d.empty(t)
			script := ok(t, "migrate", "sql", "--database-url", url)
			execScript(t, url, script)
			out := ok(t, "migrate", "status", "--database-url", url)
			require.Equal(t, d.count, strings.Count(out, " applied "), out)
			require.Equal(t, "outbox_event is up to date, at migration "+strconv.Itoa(d.count)+".\n", ok(t, "migrate", "up", "--database-url", url))
			// Again: recording a migration twice is a no-op, but the
			// migrations themselves are not all idempotent.
		})
	}
}

// execScript runs script on the database of url.
func execScript(t *testing.T, url, script string) {
	t.Helper()
	ctx := t.Context()
	target, err := parseDatabaseURL(url)
	require.NoError(t, err)
	switch target.dialect {
	case dialectPostgres:
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer conn.Close(context.WithoutCancel(ctx))
		_, err = conn.Exec(ctx, script)
		require.NoError(t, err)
	case dialectMySQL:
		connector, err := mysqldriver.NewConnector(target.mysql)
		require.NoError(t, err)
		db := sql.OpenDB(connector)
		defer db.Close()
		for _, st := range migrationfiles.Split(script) {
			_, err := db.ExecContext(ctx, st.Text)
			require.NoError(t, err, st.Text)
		}
	case dialectSQLite:
		db, err := sqlite.Open(ctx, target.path)
		require.NoError(t, err)
		defer db.Close()
		_, err = db.ExecContext(ctx, script)
		require.NoError(t, err)
	}
}

func TestMigrateSQLFormats(t *testing.T) {
	t.Parallel()
	// migrate sql connects to nothing: these servers need not exist.
	urls := map[string]string{
		dialectPostgres: "postgres://u@127.0.0.1:1/db",
		dialectMySQL:    "mysql://u@127.0.0.1:1/db",
		dialectSQLite:   "sqlite:" + filepath.Join(t.TempDir(), "never-made.db"),
	}
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			url := urls[d.name]
			scripts, err := (&database{dialect: d.name}).scripts()
			require.NoError(t, err)

			plain := ok(t, "migrate", "sql", "--database-url", url, "--table", "orders_outbox")
			require.Equal(t, d.name != dialectMySQL, strings.Contains(plain, "\nBEGIN;\n"), plain)
			require.Equal(t, d.count, strings.Count(plain, "\n-- Migration "))
			require.NotContains(t, strings.ReplaceAll(plain, "_create_outbox_event.sql", ""), "outbox_event")
			for _, s := range scripts {
				require.Contains(t, plain, "'orders_outbox', "+strconv.Itoa(s.Version)+", '"+s.Name+"'")
			}

			goose := ok(t, "migrate", "sql", "--database-url", url, "--format", "goose")
			require.Equal(t, d.count, strings.Count(goose, "-- +goose Up\n"))
			require.Equal(t, d.count, strings.Count(goose, "-- +goose Down\n"))
			require.Equal(t, d.count, strings.Count(goose, "-- ==> 000"))
			require.Equal(t, strings.Count(goose, "-- +goose StatementBegin"), strings.Count(goose, "-- +goose StatementEnd"))

			gm := ok(t, "migrate", "sql", "--database-url", url, "--format", "golang-migrate")
			require.Equal(t, d.count, strings.Count(gm, ".up.sql <==\n"))
			require.Equal(t, d.count, strings.Count(gm, ".down.sql <==\n"))

			dir := filepath.Join(t.TempDir(), "migrations")
			out := ok(t, "migrate", "sql", "--database-url", url, "--format", "golang-migrate", "--out", dir)
			require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 2*d.count)
			files, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Len(t, files, 2*d.count)
			up, err := os.ReadFile(filepath.Join(dir, "0001_create_outbox_event.up.sql"))
			require.NoError(t, err)
			require.Contains(t, string(up), scripts[0].Up)

			// Writing the same again is fine; other content is not overwritten.
			var listed struct {
				Files []struct{ Name, Path string } `json:"files"`
			}
			require.NoError(t, json.Unmarshal([]byte(ok(t, "migrate", "sql", "--json", "--database-url", url, "--format", "golang-migrate", "--out", dir)), &listed))
			require.Len(t, listed.Files, 2*d.count)
			require.Equal(t, filepath.Join(dir, "0001_create_outbox_event.up.sql"), listed.Files[0].Path)
			r := wmoutbox(t, nil, "migrate", "sql", "--database-url", url, "--format", "golang-migrate", "--out", dir, "--table", "other")
			require.Equal(t, exitError, r.code)
			require.Contains(t, r.stderr, "0001_create_outbox_event.up.sql exists with other content")

			var printed struct {
				Files []struct{ Name, SQL string } `json:"files"`
			}
			require.NoError(t, json.Unmarshal([]byte(ok(t, "migrate", "sql", "--json", "--database-url", url, "--format", "goose")), &printed))
			require.Len(t, printed.Files, d.count)
			require.Contains(t, printed.Files[0].SQL, "-- +goose Up\n")
		})
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no command", nil, nil, "wmoutbox: no command given"},
		{"unknown command", nil, []string{"frobnicate"}, `wmoutbox: unknown command "frobnicate"`},
		{"no subcommand", nil, []string{"migrate"}, "wmoutbox: migrate: no subcommand given"},
		{"unknown subcommand", nil, []string{"migrate", "down"}, `wmoutbox: migrate: unknown subcommand "down"`},
		{"unknown flag", nil, []string{"migrate", "up", "--nope"}, "flag provided but not defined: -nope"},
		{"extra argument", nil, []string{"migrate", "up", "now", "--database-url", "sqlite:x.db"}, `wmoutbox: unexpected argument "now"`},
		{"no url", nil, []string{"migrate", "up"}, "wmoutbox: --database-url: not set, and DATABASE_URL is empty"},
		{"unknown scheme", nil, []string{"migrate", "up", "--database-url", "redis://h/0"}, `wmoutbox: --database-url: unknown scheme "redis" (want postgres://, mysql://, sqlite:)`},
		{"env url", map[string]string{"DATABASE_URL": "redis://h/0"}, []string{"migrate", "status"}, `wmoutbox: --database-url: unknown scheme "redis"`},
		{"no scheme", nil, []string{"migrate", "up", "--database-url", "localhost/db"}, "wmoutbox: --database-url: no scheme"},
		{"bad postgres url", nil, []string{"migrate", "up", "--database-url", "postgres://u:secret@h:notaport/db"}, "wmoutbox: --database-url: "},
		{"mysql without database", nil, []string{"migrate", "up", "--database-url", "mysql://u:secret@h:3306/"}, "wmoutbox: --database-url: want mysql://user:password@host:port/database"},
		{"mysql bad param", nil, []string{"migrate", "up", "--database-url", "mysql://u:secret@h/db?parseTime=maybe"}, "wmoutbox: --database-url: "},
		{"sqlite without path", nil, []string{"migrate", "up", "--database-url", "sqlite:"}, "wmoutbox: --database-url: sqlite: no file path"},
		{"schema elsewhere", nil, []string{"migrate", "up", "--database-url", "sqlite:x.db", "--schema", "s"}, "wmoutbox: --schema: only PostgreSQL has schemas (this is sqlite)"},
		{"bad table", nil, []string{"migrate", "sql", "--database-url", "sqlite:x.db", "--table", "Bad-Name"}, "wmoutbox: --table/--schema: "},
		{"bad format", nil, []string{"migrate", "sql", "--database-url", "sqlite:x.db", "--format", "flyway"}, `wmoutbox: --format: unknown format "flyway"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := wmoutbox(t, tt.env, tt.args...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			require.Contains(t, r.stderr, tt.want)
			require.NotContains(t, r.stderr, "secret")
			require.Empty(t, r.stdout)
		})
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-h"}, {"migrate", "-h"}, {"migrate", "sql", "-h"}} {
		r := wmoutbox(t, nil, args...)
		require.Equal(t, exitOK, r.code, args)
		require.Contains(t, r.stderr, "Usage: wmoutbox", args)
		require.Contains(t, r.stderr, "-database-url", args)
	}
	r := wmoutbox(t, nil, "-h")
	require.Contains(t, r.stderr, "Exit codes:\n  0  success")
	require.Contains(t, r.stderr, "migrate  apply, list and write out")
	r = wmoutbox(t, nil, "migrate", "sql", "-h")
	require.Contains(t, r.stderr, "golang-migrate  NNNN_name.up.sql")
}

func TestUnreachableDatabaseIsAnError(t *testing.T) {
	t.Parallel()
	r := wmoutbox(t, nil, "migrate", "status", "--database-url", "postgres://u:secret@127.0.0.1:1/db?connect_timeout=2")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "wmoutbox: open the postgres database: ")
}

func TestParseDatabaseURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url                     string
		user, pass, addr, db    string
		net                     string
		interpolate, parseTimes bool
	}{
		{url: "mysql://app:s%40cret@db.example:3307/shop?interpolateParams=true", user: "app", pass: "s@cret", addr: "db.example:3307", db: "shop", net: "tcp", interpolate: true},
		{url: "mysql://app@db.example/shop", user: "app", addr: "db.example:3306", db: "shop", net: "tcp"},
		{url: "mysql://app@db.example/shop?x-migrations-table=m&parseTime=true", user: "app", addr: "db.example:3306", db: "shop", net: "tcp", parseTimes: true},
		{url: "mysql://app:p@[::1]:3306/shop?parseTime=true", user: "app", pass: "p", addr: "[::1]:3306", db: "shop", net: "tcp", parseTimes: true},
		{url: "mysql://root@tcp(127.0.0.1:3306)/test?interpolateParams=true", user: "root", addr: "127.0.0.1:3306", db: "test", net: "tcp", interpolate: true},
		{url: "root:pa:ss@tcp(127.0.0.1:3306)/test", user: "root", pass: "pa:ss", addr: "127.0.0.1:3306", db: "test", net: "tcp"},
		{url: "app@unix(/run/mysqld/mysqld.sock)/shop", user: "app", addr: "/run/mysqld/mysqld.sock", db: "shop", net: "unix"},
	}
	for _, tt := range tests {
		target, err := parseDatabaseURL(tt.url)
		require.NoError(t, err, tt.url)
		require.Equal(t, dialectMySQL, target.dialect, tt.url)
		cfg := target.mysql
		require.Equal(t, tt.user, cfg.User, tt.url)
		require.Equal(t, tt.pass, cfg.Passwd, tt.url)
		require.Equal(t, tt.net, cfg.Net, tt.url)
		require.Equal(t, tt.addr, cfg.Addr, tt.url)
		require.Equal(t, tt.db, cfg.DBName, tt.url)
		require.Equal(t, tt.interpolate, cfg.InterpolateParams, tt.url)
		require.Equal(t, tt.parseTimes, cfg.ParseTime, tt.url)
	}

	for url, path := range map[string]string{
		"sqlite:app.db":                 "app.db",
		"sqlite://app.db":               "app.db",
		"sqlite:///var/lib/app/app.db":  "/var/lib/app/app.db",
		"sqlite:/var/lib/app/app.db":    "/var/lib/app/app.db",
		"sqlite3:dir/app.db?ignored=no": "dir/app.db?ignored=no",
	} {
		target, err := parseDatabaseURL(url)
		require.NoError(t, err, url)
		require.Equal(t, dialectSQLite, target.dialect)
		require.Equal(t, path, target.path, url)
	}

	for _, url := range []string{"postgres://u@h/db", "postgresql://u@h:5433/db?sslmode=disable"} {
		target, err := parseDatabaseURL(url)
		require.NoError(t, err, url)
		require.Equal(t, dialectPostgres, target.dialect)
		require.Equal(t, "db", target.postgres.ConnConfig.Database)
	}
}

// TestSplitMigrations splits every dialect's migrations into statements
// that hold no semicolon inside: those goose runs without StatementBegin.
func TestSplitMigrations(t *testing.T) {
	t.Parallel()
	for _, load := range []func() ([]migrationfiles.Migration, error){
		func() ([]migrationfiles.Migration, error) { return postgres.Migrations(postgres.Config{}) },
		func() ([]migrationfiles.Migration, error) { return mysql.Migrations(mysql.Config{}) },
		func() ([]migrationfiles.Migration, error) { return sqlite.Migrations(sqlite.Config{}) },
	} {
		migrations, err := load()
		require.NoError(t, err)
		for _, m := range migrations {
			for _, s := range migrationfiles.Split(m.SQL + m.Down) {
				require.True(t, strings.HasSuffix(s.Text, ";"), "%s: %q", m.Name, s.Text)
			}
		}
	}
}
