package testdb

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wmoutbox/wmoutbox/internal/testenv"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

const (
	// envURL names the server.
	envURL = "TEST_DATABASE_URL"

	defaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

	templatePrefix = "wmoutbox_tmpl_"
	testPrefix     = "wmoutbox_test_"

	// maxLive caps the test databases a process holds at once.
	maxLive = 8
	// poolMaxConns caps the connections of a pool from New.
	poolMaxConns = 4

	// lockKey is the session advisory lock held while building templates
	// and sweeping. It differs from the migrator's key: Migrate takes that
	// one inside the template while this one is held.
	lockKey = int64(0x776d746573746462) // "wmtestdb"

	connectTimeout = 5 * time.Second
	// setupTimeout bounds the per-process setup, waiting for the lock
	// included; opTimeout bounds one clone or drop.
	setupTimeout = 2 * time.Minute
	opTimeout    = time.Minute

	// inUseRetries and inUseBackoff pace retries of statements that fail
	// while a session lingers on their database.
	inUseRetries = 6
	inUseBackoff = 25 * time.Millisecond
	// rebuilds is how often a clone builds the template again after
	// another process dropped it.
	rebuilds = 3
	// slotMargin is how long before the test deadline a wait for a slot
	// gives up, to fail with a message rather than a timeout panic.
	slotMargin = 10 * time.Second
)

// SQLSTATE codes this package tells apart.
const (
	codeObjectInUse       = "55006" // database is being accessed by other users
	codeUndefinedDatabase = "3D000" // template does not exist
)

var (
	// setupOnce runs setup once per process; every caller gets its result.
	setupOnce = sync.OnceValues(setup)
	// slots holds a token per live test database.
	slots = make(chan struct{}, maxLive)
	// idle holds the databases of ended tests, reset to the template's
	// state, for the next tests of this process.
	idle = make(chan string, maxLive)
	// counter numbers this process's test databases.
	counter atomic.Uint64
	// testName matches a test database name, capturing its pid.
	testName = regexp.MustCompile(`^` + testPrefix + `([0-9]+)_[0-9]+$`)
)

// URL returns the connection URL of a database in the migrated template's
// state, of this test alone: cloned from the template, or one an ended
// test left, reset. At t.Cleanup it is reset for the next test, or dropped
// (DROP DATABASE ... WITH (FORCE)). Skips the test when no server answers, with a
// message naming TEST_DATABASE_URL; under CI=true it fails instead
// (t.Fatalf).
func URL(t testing.TB) string {
	t.Helper()
	s, err := setupOnce()
	if err != nil {
		var unreachable *unreachableError
		if errors.As(err, &unreachable) {
			testenv.SkipOrFail(t, "testdb: %v", err)
		}
		t.Fatalf("testdb: %v", err)
	}

	acquire(t)
	name, fresh := take()
	// Registered before the clone, so that a failed or partial clone still
	// frees the slot and drops whatever exists.
	t.Cleanup(func() {
		defer func() { <-slots }()
		if err := s.release(name); err != nil {
			t.Errorf("testdb: %v", err)
		}
	})
	if fresh {
		if err := s.clone(name); err != nil {
			t.Fatalf("testdb: %v", err)
		}
	}
	return s.urlFor(name)
}

// EmptyURL is [URL] for a database without the wmoutbox tables: its
// public schema is empty, as CREATE DATABASE makes it, for tests of
// migrations. It is reset and reused at cleanup as URL's are.
func EmptyURL(t testing.TB) string {
	t.Helper()
	url := URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("testdb: empty: %v", err)
	}
	defer closeConn(conn)
	if _, err := conn.Exec(ctx, sqlReset); err != nil {
		t.Fatalf("testdb: empty: %v", err)
	}
	return url
}

// take returns an idle database, or the name of a new one to clone
// (fresh).
func take() (name string, fresh bool) {
	select {
	case name := <-idle:
		return name, false
	default:
		return newName(), true
	}
}

// release hands name to the next test when it can be reset, and drops it
// otherwise.
func (s *server) release(name string) error {
	if err := s.reset(name); err == nil {
		select {
		case idle <- name:
			return nil
		default:
		}
	}
	return s.drop(name)
}

// reset brings database name back to the template's state, which costs
// the server far less than a drop and a clone: it ends the sessions a test
// left on it, drops every schema and large object, and migrates it again.
func (s *server) reset(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cfg := s.config.Copy()
	cfg.Database = name
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("reset %s: connect: %w", name, err)
	}
	defer closeConn(conn)
	if _, err := conn.Exec(ctx, sqlReset); err != nil {
		return fmt.Errorf("reset %s: %w", name, err)
	}
	if err := postgres.Migrate(ctx, conn, postgres.Config{}); err != nil {
		return fmt.Errorf("reset %s: migrate: %w", name, err)
	}
	return nil
}

// sqlReset empties the database it runs in: the sessions a test left open
// (a listener, a pool it did not close) end, and so do their locks, which
// the drops then wait for; database settings, replication slots and
// publications, schemas with all they hold, and large objects go. The
// public schema comes back as CREATE DATABASE makes it.
const sqlReset = `
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid();
DO $$
DECLARE
    name text;
BEGIN
    EXECUTE format('ALTER DATABASE %I RESET ALL', current_database());
    -- A log feed's slot and publication, left by a test that failed
    -- before its cleanup: a slot holds WAL for ever. One whose reader is
    -- still exiting stays.
    PERFORM pg_drop_replication_slot(slot_name) FROM pg_replication_slots
        WHERE database = current_database() AND NOT active;
    FOR name IN SELECT pubname FROM pg_publication LOOP
        EXECUTE format('DROP PUBLICATION %I', name);
    END LOOP;
    FOR name IN SELECT nspname FROM pg_namespace
        WHERE nspname NOT LIKE 'pg\_%' AND nspname <> 'information_schema'
    LOOP
        EXECUTE format('DROP SCHEMA %I CASCADE', name);
    END LOOP;
    PERFORM lo_unlink(oid) FROM pg_largeobject_metadata;
END
$$;
CREATE SCHEMA public AUTHORIZATION pg_database_owner;
GRANT USAGE ON SCHEMA public TO PUBLIC;`

// ForExample is [URL] for runnable Example functions, which cannot skip:
// it returns the URL of a migrated database of its own and a function that
// releases it (resets or drops it, as URL's cleanup does), and panics,
// naming TEST_DATABASE_URL, when that fails.
func ForExample() (url string, drop func()) {
	s, err := setupOnce()
	if err != nil {
		panic(fmt.Sprintf("testdb: examples need PostgreSQL: %v", err))
	}
	slots <- struct{}{}
	name, fresh := take()
	drop = func() {
		defer func() { <-slots }()
		if err := s.release(name); err != nil {
			panic(fmt.Sprintf("testdb: %v", err))
		}
	}
	if fresh {
		if err := s.clone(name); err != nil {
			drop()
			panic(fmt.Sprintf("testdb: %v", err))
		}
	}
	return s.urlFor(name), drop
}

func newName() string {
	return fmt.Sprintf("%s%d_%d", testPrefix, os.Getpid(), counter.Add(1))
}

// New returns a *pgxpool.Pool (MaxConns 4) on a fresh database from URL(t);
// the pool is closed at cleanup before the drop.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return newPool(t, func(*pgxpool.Config) {})
}

// NewInMode is [New] with the pool's statements sent in mode, as pools are
// set up behind PgBouncer (pgx.QueryExecModeExec, QueryExecModeSimpleProtocol):
// pgx then encodes parameters without learning their types from the server.
func NewInMode(t testing.TB, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	return newPool(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.DefaultQueryExecMode = mode })
}

func newPool(t testing.TB, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	connString := URL(t)
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		t.Fatalf("testdb: parse pool config: %v", err)
	}
	cfg.MaxConns = poolMaxConns
	configure(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testdb: open pool: %v", err)
	}
	// Cleanups run last-in first-out: the pool closes before URL's drop.
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("testdb: ping %s: %v", cfg.ConnConfig.Database, err)
	}
	return pool
}

// acquire takes a database slot, waiting for one if need be. A test that
// holds several databases while others wait can starve; it then fails
// shortly before the test deadline, saying why, rather than panicking in it.
func acquire(t testing.TB) {
	t.Helper()
	select {
	case slots <- struct{}{}:
		return
	default:
	}
	var expired <-chan time.Time
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok {
			timer := time.NewTimer(time.Until(deadline) - slotMargin)
			defer timer.Stop()
			expired = timer.C
		}
	}
	select {
	case slots <- struct{}{}:
	case <-expired:
		t.Fatalf("testdb: no free database slot before the test deadline: this process holds %d, the cap; "+
			"do tests holding several databases each wait for more?", maxLive)
	}
}

// server is the outcome of setup: where to connect and what to clone.
type server struct {
	connString string          // TEST_DATABASE_URL or the default
	config     *pgx.ConnConfig // connString parsed, for admin connections
	template   string
}

// unreachableError means no server answered: tests skip, or fail under CI.
type unreachableError struct {
	where string
	err   error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("no PostgreSQL server answers at %s; set %s to a server where this user may create databases. %v",
		e.where, envURL, e.err)
}

func (e *unreachableError) Unwrap() error { return e.err }

// setup parses the server's address, then, holding the lock, sweeps the
// databases of dead processes and makes sure the template exists.
func setup() (*server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()

	connString := os.Getenv(envURL)
	if connString == "" {
		connString = defaultURL
	}
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", envURL, err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "wmoutbox testdb"
	}
	template, err := templateName()
	if err != nil {
		return nil, err
	}
	s := &server{connString: connString, config: cfg, template: template}

	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		where := fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			// The server answered, and refused: that is no reason to skip.
			return nil, fmt.Errorf("connect to %s (%s): %w", where, envURL, err)
		}
		return nil, &unreachableError{where: where, err: err}
	}
	defer closeConn(conn)

	err = withLock(ctx, conn, func() error {
		if err := sweep(ctx, conn); err != nil {
			return err
		}
		return s.ensureTemplate(ctx, conn)
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// templateName names the template after a hash of the rendered migrations.
func templateName() (string, error) {
	migrations, err := postgres.Migrations(postgres.Config{})
	if err != nil {
		return "", fmt.Errorf("render migrations: %w", err)
	}
	h := sha256.New()
	for _, m := range migrations {
		fmt.Fprintf(h, "%d\x00%s\x00%s\x00", m.Version, m.Name, m.SQL)
	}
	return templatePrefix + hex.EncodeToString(h.Sum(nil))[:8], nil
}

// withLock runs fn holding the session advisory lock on conn.
func withLock(ctx context.Context, conn *pgx.Conn, fn func() error) error {
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockKey); err != nil {
		return fmt.Errorf("take advisory lock: %w", err)
	}
	err := fn()
	// On failure the lock goes with the session, which the caller closes.
	_, _ = conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, lockKey)
	return err
}

// sweep drops the test databases of processes that are gone. It runs before
// this process creates any, so those named with its own pid are a dead
// process's too: pids get reused.
func sweep(ctx context.Context, conn *pgx.Conn) error {
	names, err := databases(ctx, conn, testPrefix)
	if err != nil {
		return err
	}
	self := os.Getpid()
	for _, name := range names {
		m := testName.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil {
			continue
		}
		if pid > 0 && pid != self && !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue // alive (EPERM: someone else's, but alive)
		}
		if err := dropDatabase(ctx, conn, name); err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
	}
	return nil
}

// ensureTemplate builds the template unless it exists, and drops every
// other wmoutbox_tmpl_* database: older templates, and half-built ones of
// crashed processes. The caller holds the lock, so no build is under way.
func (s *server) ensureTemplate(ctx context.Context, conn *pgx.Conn) error {
	names, err := databases(ctx, conn, templatePrefix)
	if err != nil {
		return err
	}
	exists := false
	for _, name := range names {
		if name == s.template {
			exists = true
			continue
		}
		// A template cannot be dropped.
		if _, err := conn.Exec(ctx, `ALTER DATABASE `+ident(name)+` WITH IS_TEMPLATE false`); err != nil {
			return fmt.Errorf("unmark old template %s: %w", name, err)
		}
		if err := dropDatabase(ctx, conn, name); err != nil {
			return fmt.Errorf("drop old template: %w", err)
		}
	}
	if exists {
		return nil
	}
	return s.buildTemplate(ctx, conn)
}

// buildTemplate creates the template under a temporary name, migrates it,
// bars connections to it, and renames it: the rename publishes it whole.
func (s *server) buildTemplate(ctx context.Context, conn *pgx.Conn) (err error) {
	tmp := fmt.Sprintf("%s_build_%d", s.template, os.Getpid())
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+ident(tmp)+` TEMPLATE template0`); err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	defer func() {
		if err != nil {
			_ = dropDatabase(ctx, conn, tmp)
		}
	}()

	cfg := s.config.Copy()
	cfg.Database = tmp
	db, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", tmp, err)
	}
	err = postgres.Migrate(ctx, db, postgres.Config{})
	closeConn(db)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", tmp, err)
	}

	// No connections from now on, autovacuum's aside: clones then only
	// meet a session that has not finished exiting.
	if _, err := conn.Exec(ctx, `ALTER DATABASE `+ident(tmp)+` WITH IS_TEMPLATE true ALLOW_CONNECTIONS false`); err != nil {
		return fmt.Errorf("mark %s as template: %w", tmp, err)
	}
	// The migrating session may still be exiting: renaming waits it out.
	err = retryInUse(ctx, func() error {
		_, err := conn.Exec(ctx, `ALTER DATABASE `+ident(tmp)+` RENAME TO `+ident(s.template))
		return err
	})
	if err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, s.template, err)
	}
	return nil
}

// clone creates database name from the template.
func (s *server) clone(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, s.config)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer closeConn(conn)

	create := `CREATE DATABASE ` + ident(name) + ` TEMPLATE ` + ident(s.template)
	for rebuilt := 0; ; rebuilt++ {
		err := retryInUse(ctx, func() error {
			_, err := conn.Exec(ctx, create)
			return err
		})
		if err == nil {
			return nil
		}
		if code(err) != codeUndefinedDatabase || rebuilt == rebuilds {
			return fmt.Errorf("create %s from %s: %w", name, s.template, err)
		}
		// A process testing other migrations dropped our template.
		if err := withLock(ctx, conn, func() error { return s.ensureTemplate(ctx, conn) }); err != nil {
			return err
		}
	}
}

// drop drops database name, ending its sessions.
func (s *server) drop(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, s.config)
	if err != nil {
		return fmt.Errorf("drop %s: connect: %w", name, err)
	}
	defer closeConn(conn)
	return dropDatabase(ctx, conn, name)
}

// urlFor is the connection string of the server with database db.
func (s *server) urlFor(db string) string {
	if strings.HasPrefix(s.connString, "postgres://") || strings.HasPrefix(s.connString, "postgresql://") {
		if u, err := url.Parse(s.connString); err == nil {
			u.Path = "/" + db
			u.RawPath = ""
			return u.String()
		}
	}
	// Keyword/value form: a repeated keyword's last value wins.
	return s.connString + " dbname='" + db + "'"
}

// databases lists the databases whose names start with prefix.
func databases(ctx context.Context, conn *pgx.Conn, prefix string) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE starts_with(datname, $1) ORDER BY datname`, prefix)
	if err != nil {
		return nil, fmt.Errorf("list %s* databases: %w", prefix, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list %s* databases: %w", prefix, err)
	}
	return names, nil
}

func dropDatabase(ctx context.Context, conn *pgx.Conn, name string) error {
	if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+ident(name)+` WITH (FORCE)`); err != nil {
		return fmt.Errorf("drop %s: %w", name, err)
	}
	return nil
}

// retryInUse runs fn again, after a growing backoff, while it fails because
// a session is on a database it needs alone.
func retryInUse(ctx context.Context, fn func() error) error {
	delay := inUseBackoff
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || code(err) != codeObjectInUse || attempt == inUseRetries {
			return err
		}
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return errors.Join(err, ctx.Err())
		}
		delay *= 2
	}
}

// code is err's SQLSTATE, or "".
func code(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	_ = conn.Close(ctx)
}
