package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wmoutbox/wmoutbox/outbox/mysql"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
)

// The dialects, as --database-url names them.
const (
	dialectPostgres = "postgres"
	dialectMySQL    = "mysql"
	dialectSQLite   = "sqlite"
)

// defaultTable is --table's default, every dialect's.
const defaultTable = postgres.DefaultTable

// envDatabaseURL is where --database-url defaults from.
const envDatabaseURL = "DATABASE_URL"

// target is a parsed --database-url.
type target struct {
	dialect  string
	postgres *pgxpool.Config     // dialectPostgres
	mysql    *mysqldriver.Config // dialectMySQL
	path     string              // dialectSQLite
}

// driverDSN matches a go-sql-driver/mysql DSN's address part: an optional
// user and a protocol with its address in parentheses, as in
// user:pass@tcp(host:3306)/db.
var driverDSN = regexp.MustCompile(`^([^/]*@)?[a-z0-9]+\(`)

// parseDatabaseURL reads a --database-url. Errors name the flag, and never
// repeat the URL, which may hold a password.
func parseDatabaseURL(raw string) (*target, error) {
	if driverDSN.MatchString(raw) {
		// A bare go-sql-driver DSN: user:password@tcp(host:3306)/db.
		return parseMySQLDSN(raw)
	}
	scheme, rest, hasScheme := strings.Cut(raw, ":")
	if !hasScheme {
		return nil, usagef("--database-url: no scheme (want postgres://, mysql://, sqlite:)")
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		cfg, err := pgxpool.ParseConfig(raw)
		if err != nil {
			return nil, usagef("--database-url: %s", redact(err))
		}
		return &target{dialect: dialectPostgres, postgres: cfg}, nil
	case "mysql":
		dsn, ok := strings.CutPrefix(rest, "//")
		if !ok {
			return nil, usagef("--database-url: want mysql://user:password@host:port/database")
		}
		if driverDSN.MatchString(dsn) {
			return parseMySQLDSN(dsn)
		}
		return parseMySQLURL(raw)
	case "sqlite", "sqlite3":
		path := strings.TrimPrefix(rest, "//")
		if path == "" {
			return nil, usagef("--database-url: sqlite: no file path (want sqlite:PATH or sqlite:///ABSOLUTE/PATH)")
		}
		return &target{dialect: dialectSQLite, path: path}, nil
	}
	return nil, usagef("--database-url: unknown scheme %q (want postgres://, mysql://, sqlite:)", scheme)
}

// parseMySQLDSN reads a go-sql-driver/mysql DSN.
func parseMySQLDSN(dsn string) (*target, error) {
	cfg, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		return nil, usagef("--database-url: MySQL DSN: %s", redact(err))
	}
	if cfg.DBName == "" {
		return nil, usagef("--database-url: MySQL DSN names no database")
	}
	return &target{dialect: dialectMySQL, mysql: cfg}, nil
}

// parseMySQLURL reads the URL form that goose and golang-migrate users
// write, mysql://user:password@host:port/database?param=value, into a
// go-sql-driver/mysql configuration: TCP to host (port 3306 when none),
// the parameters as the driver's DSN reads them, but for golang-migrate's
// (x-…), which are dropped.
func parseMySQLURL(raw string) (*target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, usagef("--database-url: %s", redact(err))
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, usagef("--database-url: want mysql://user:password@host:port/database, with one database name")
	}
	cfg := mysqldriver.NewConfig()
	cfg.Net = "tcp"
	cfg.Addr = u.Host
	if u.Port() == "" && u.Hostname() != "" {
		cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.DBName = db
	query := u.Query()
	for name := range query {
		// golang-migrate's own (x-migrations-table, ...), which the
		// driver would send to the server as system variables.
		if strings.HasPrefix(name, "x-") {
			query.Del(name)
		}
	}
	if len(query) > 0 {
		// The driver's own parser applies and checks the parameters.
		params, err := mysqldriver.ParseDSN("/" + db + "?" + query.Encode())
		if err != nil {
			return nil, usagef("--database-url: %s", redact(err))
		}
		params.User, params.Passwd, params.Net, params.Addr = cfg.User, cfg.Passwd, cfg.Net, cfg.Addr
		cfg = params
	}
	return &target{dialect: dialectMySQL, mysql: cfg}, nil
}

// redact keeps what an error of a URL parser says without the URL, which
// url.Error quotes whole, password and all, and pgconn.ParseConfigError
// with the password masked as best it can.
func redact(err error) string {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return "invalid URL: " + uerr.Err.Error()
	}
	var perr *pgconn.ParseConfigError
	if errors.As(err, &perr) {
		// "cannot parse `URL`: reason (inner error)": the reason, and the
		// inner error redacted.
		msg := perr.Error()
		reason := ""
		if i := strings.LastIndex(msg, "`: "); i >= 0 {
			reason = msg[i+3:]
		}
		if inner := errors.Unwrap(perr); inner != nil {
			reason = strings.TrimSuffix(reason, " ("+inner.Error()+")") + " (" + redact(inner) + ")"
		}
		return strings.TrimSpace("cannot parse the URL: " + reason)
	}
	if msg := err.Error(); !strings.Contains(msg, "://") && !strings.Contains(msg, "@") {
		return msg
	}
	return "cannot parse it"
}

// database is an open database of the global flags, of one of the three
// dialects, with the outbox table's configuration.
type database struct {
	dialect string
	pool    *pgxpool.Pool // dialectPostgres
	db      *sql.DB       // dialectMySQL, dialectSQLite

	postgres postgres.Config
	mysql    mysql.Config
	sqlite   sqlite.Config
}

// table is the outbox table's name, as the user gave it.
func (d *database) table() string { return cmp.Or(d.postgres.Table, defaultTable) }

// open opens the database of the global flags. Its mistakes (no URL, an
// unknown scheme, --schema with another dialect) are usage errors.
func (c *cli) open(ctx context.Context) (*database, error) {
	d, t, err := c.configure()
	if err != nil {
		return nil, err
	}
	switch t.dialect {
	case dialectPostgres:
		t.postgres.MaxConns = 2
		d.pool, err = pgxpool.NewWithConfig(ctx, t.postgres)
		if err == nil {
			err = d.pool.Ping(ctx)
		}
	case dialectMySQL:
		connector, cerr := mysqldriver.NewConnector(t.mysql)
		if cerr != nil {
			return nil, usagef("--database-url: %v", cerr)
		}
		d.db = sql.OpenDB(connector)
		err = d.db.PingContext(ctx)
	case dialectSQLite:
		d.db, err = sqlite.Open(ctx, t.path)
	}
	if err != nil {
		d.close()
		return nil, fmt.Errorf("open the %s database: %w", t.dialect, err)
	}
	return d, nil
}

// configure reads the global flags into a database that is not open, for
// commands that need only the dialect and the table's names.
func (c *cli) configure() (*database, *target, error) {
	raw := c.globals.databaseURL
	if raw == "" {
		raw = c.getenv(envDatabaseURL)
	}
	if raw == "" {
		return nil, nil, usagef("--database-url: not set, and %s is empty", envDatabaseURL)
	}
	t, err := parseDatabaseURL(raw)
	if err != nil {
		return nil, nil, err
	}
	if c.globals.schema != "" && t.dialect != dialectPostgres {
		return nil, nil, usagef("--schema: only PostgreSQL has schemas (this is %s)", t.dialect)
	}
	d := &database{
		dialect:  t.dialect,
		postgres: postgres.Config{Schema: c.globals.schema, Table: c.globals.table},
		mysql:    mysql.Config{Table: c.globals.table},
		sqlite:   sqlite.Config{Table: c.globals.table},
	}
	// The names are checked before anything is opened.
	if _, err := d.migrations(); err != nil {
		return nil, nil, usagef("--table/--schema: %v", err)
	}
	return d, t, nil
}

func (d *database) close() {
	if d.pool != nil {
		d.pool.Close()
	}
	if d.db != nil {
		_ = d.db.Close()
	}
}

// migrations returns the dialect's migrations for the table.
func (d *database) migrations() ([]postgres.Migration, error) {
	switch d.dialect {
	case dialectPostgres:
		return postgres.Migrations(d.postgres)
	case dialectMySQL:
		return mysql.Migrations(d.mysql)
	default:
		return sqlite.Migrations(d.sqlite)
	}
}

// scripts returns the dialect's migrations as scripts for other tools.
func (d *database) scripts() ([]postgres.MigrationScript, error) {
	switch d.dialect {
	case dialectPostgres:
		return postgres.MigrationScripts(d.postgres)
	case dialectMySQL:
		return mysql.MigrationScripts(d.mysql)
	default:
		return sqlite.MigrationScripts(d.sqlite)
	}
}

// applied returns the migrations recorded applied to the table.
func (d *database) applied(ctx context.Context) ([]postgres.AppliedMigration, error) {
	switch d.dialect {
	case dialectPostgres:
		return postgres.AppliedMigrations(ctx, d.pool, d.postgres)
	case dialectMySQL:
		return mysql.AppliedMigrations(ctx, d.db, d.mysql)
	default:
		return sqlite.AppliedMigrations(ctx, d.db, d.sqlite)
	}
}

// migrate applies the pending migrations.
func (d *database) migrate(ctx context.Context) error {
	switch d.dialect {
	case dialectPostgres:
		return postgres.Migrate(ctx, d.pool, d.postgres)
	case dialectMySQL:
		return mysql.Migrate(ctx, d.db, d.mysql)
	default:
		return sqlite.Migrate(ctx, d.db, d.sqlite)
	}
}

// errNotMigrated is returned by openMigrated for a table short of the
// latest migration.
var errNotMigrated = errors.New("not migrated")

// openMigrated is [cli.open] for commands that read or change the outbox
// table: it fails, asking for `wmoutbox migrate up`, unless the table has
// every migration this command knows, and fails too when the table has
// migrations of a later wmoutbox.
func (c *cli) openMigrated(ctx context.Context) (*database, error) {
	d, err := c.open(ctx)
	if err != nil {
		return nil, err
	}
	if err := d.checkMigrated(ctx); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *database) checkMigrated(ctx context.Context) error {
	migrations, err := d.migrations()
	if err != nil {
		return err
	}
	applied, err := d.applied(ctx)
	if err != nil {
		return err
	}
	latest := migrations[len(migrations)-1].Version
	at := 0
	if len(applied) > 0 {
		at = applied[len(applied)-1].Version
	}
	switch {
	case at == 0:
		return fmt.Errorf("%w: table %s has no wmoutbox migrations: run `wmoutbox migrate up`", errNotMigrated, d.table())
	case at < latest:
		return fmt.Errorf("%w: table %s is at migration %d of %d: run `wmoutbox migrate up`", errNotMigrated, d.table(), at, latest)
	case at > latest:
		return fmt.Errorf("table %s is at migration %d, which this wmoutbox does not know (it knows %d): use a later wmoutbox", d.table(), at, latest)
	}
	return nil
}

// qualifiedTable is the outbox table's name, with its schema if one is
// configured.
func (d *database) qualifiedTable() string {
	if d.postgres.Schema != "" {
		return d.postgres.Schema + "." + d.table()
	}
	return d.table()
}
