// Package testmysql gives each test its own MySQL (or MariaDB) database
// with the wmoutbox tables migrated. Tests only: it creates and drops
// databases.
//
//	db := testmysql.New(t) // *sql.DB on a fresh, migrated database
//
// The server is TEST_MYSQL_DSN, a go-sql-driver/mysql DSN without a
// database name, by default root@tcp(127.0.0.1:3306)/. The user must be
// allowed to create databases. When no server answers, tests skip with a
// message naming TEST_MYSQL_DSN; under CI=true they fail instead.
//
// Each test database is wmoutbox_mtest_<pid>_<n>, dropped at the test's
// cleanup. A process holds at most 8 at once, with at most 8 connections
// each: 64 connections a test binary, so that two binaries testing at once
// (go test runs packages in parallel) stay under the server's
// max_connections, 151 by default. Once per process, databases of processes that died without
// cleaning up (wmoutbox_mtest_<pid>_* whose pid is no live process on this
// machine) are dropped.
package testmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/wmoutbox/wmoutbox/internal/testenv"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
)

const (
	envDSN     = "TEST_MYSQL_DSN"
	defaultDSN = "root@tcp(127.0.0.1:3306)/"
	testPrefix = "wmoutbox_mtest_"

	// maxLive caps the test databases a process holds at once; maxConns
	// the connections of each.
	maxLive  = 8
	maxConns = 8

	setupTimeout = time.Minute
	opTimeout    = time.Minute
)

var (
	setupOnce = sync.OnceValues(setup)
	slots     = make(chan struct{}, maxLive)
	counter   atomic.Uint64
	testName  = regexp.MustCompile(`^` + testPrefix + `([0-9]+)_[0-9]+$`)
)

// DSN creates a fresh database with the wmoutbox tables of the default
// configuration migrated, and returns its DSN; the database is dropped at
// t.Cleanup.
func DSN(t testing.TB) string {
	t.Helper()
	return newDSN(t, true)
}

func newDSN(t testing.TB, migrate bool) string {
	t.Helper()
	admin, err := setupOnce()
	if err != nil {
		var unreachable *unreachableError
		if errors.As(err, &unreachable) {
			testenv.SkipOrFail(t, "testmysql: %v", err)
		}
		t.Fatalf("testmysql: %v", err)
	}
	select {
	case slots <- struct{}{}:
	case <-t.Context().Done():
		t.Fatalf("testmysql: no free test database: %v", t.Context().Err())
	}
	name := fmt.Sprintf("%s%d_%d", testPrefix, os.Getpid(), counter.Add(1))
	t.Cleanup(func() {
		defer func() { <-slots }()
		if err := dropDatabase(admin, name); err != nil {
			t.Errorf("testmysql: %v", err)
		}
	})
	dsn, err := create(admin, name, migrate)
	if err != nil {
		t.Fatalf("testmysql: %v", err)
	}
	return dsn
}

// EmptyDSN is [DSN] for a database without the wmoutbox tables, for tests
// of migrations.
func EmptyDSN(t testing.TB) string {
	t.Helper()
	return newDSN(t, false)
}

// New returns a *sql.DB on a fresh database from DSN(t); it is closed at
// cleanup, before the drop.
func New(t testing.TB) *sql.DB {
	t.Helper()
	db, err := Open(DSN(t))
	if err != nil {
		t.Fatalf("testmysql: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// Open opens dsn with the pool limits of this package's databases.
func Open(dsn string) (*sql.DB, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	return db, nil
}

// ForExample is [DSN] for runnable Example functions, which cannot skip:
// it returns the DSN of a fresh migrated database and a function that
// drops it, and panics, naming TEST_MYSQL_DSN, when that fails.
func ForExample() (dsn string, drop func()) {
	admin, err := setupOnce()
	if err != nil {
		panic(fmt.Sprintf("testmysql: examples need MySQL: %v", err))
	}
	slots <- struct{}{}
	name := fmt.Sprintf("%s%d_%d", testPrefix, os.Getpid(), counter.Add(1))
	drop = func() {
		defer func() { <-slots }()
		if err := dropDatabase(admin, name); err != nil {
			panic(fmt.Sprintf("testmysql: %v", err))
		}
	}
	if dsn, err = create(admin, name, true); err != nil {
		drop()
		panic(fmt.Sprintf("testmysql: %v", err))
	}
	return dsn, drop
}

// admin is the server's address. It keeps no connection open between
// uses: a pool open for the whole process would be a leak to goleak.
type admin struct {
	cfg *mysqldriver.Config
}

// exec runs statement on the server, on a connection of its own.
func (a *admin) exec(ctx context.Context, statement string) error {
	db, err := sql.Open("mysql", a.cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, statement)
	return err
}

type unreachableError struct {
	dsn string
	err error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("no MySQL server at %s (set %s): %v", e.dsn, envDSN, e.err)
}

func (e *unreachableError) Unwrap() error { return e.err }

// setup opens the server named by TEST_MYSQL_DSN and drops the test
// databases of processes that are gone.
func setup() (*admin, error) {
	dsn := os.Getenv(envDSN)
	if dsn == "" {
		dsn = defaultDSN
	}
	cfg, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envDSN, err)
	}
	if cfg.DBName != "" {
		return nil, fmt.Errorf("%s names database %q: give the server only", envDSN, cfg.DBName)
	}
	cfg.Timeout = 5 * time.Second
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		return nil, &unreachableError{dsn: dsn, err: err}
	}
	a := &admin{cfg: cfg}
	if err := a.sweep(ctx, db); err != nil {
		return nil, err
	}
	return a, nil
}

// sweep drops the test databases of processes of this machine that are
// gone.
func (a *admin) sweep(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, "SHOW DATABASES LIKE '"+testPrefix+"%'")
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	// For the early returns: once Next returns false it has closed rows,
	// before the drops below.
	defer rows.Close()
	var stale []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		m := testName.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if pid > 0 && pid != os.Getpid() && !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue // alive (EPERM: someone else's, but alive)
		}
		stale = append(stale, name)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	for _, name := range stale {
		if err := dropDatabase(a, name); err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
	}
	return nil
}

// create creates database name, migrates it if asked, and returns its
// DSN.
func create(a *admin, name string, migrate bool) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := a.exec(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	cfg := a.cfg.Clone()
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	if !migrate {
		return dsn, nil
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return "", err
	}
	defer db.Close()
	if err := mysql.Migrate(ctx, db, mysql.Config{}); err != nil {
		return "", fmt.Errorf("migrate %s: %w", name, err)
	}
	return dsn, nil
}

func dropDatabase(a *admin, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := a.exec(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}
