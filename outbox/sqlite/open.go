package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// DriverName is the database/sql driver the store works with, registered
// by modernc.org/sqlite (pure Go, no cgo), which this package imports.
const DriverName = "sqlite"

// Memory is the path [Open] takes for a private in-memory database.
const Memory = ":memory:"

// BusyTimeout is how long a connection from [Open] waits for SQLite's
// write lock before a statement fails with SQLITE_BUSY.
const BusyTimeout = 5 * time.Second

// idleConns is how many idle connections a database from Open keeps; they
// are never closed for age, so an in-memory database outlives idle spells.
const idleConns = 4

// memoryDatabases numbers the in-memory databases of this process.
var memoryDatabases atomic.Uint64

// Open opens the SQLite database file at path, creating it if needed, with
// the settings the outbox relies on:
//
//   - _txlock=immediate: every read-write transaction begun through
//     database/sql takes the write lock at BEGIN, so it never has to
//     upgrade a read lock, which SQLite refuses with SQLITE_BUSY (without
//     waiting) when another writer committed in between;
//   - _busy_timeout: a connection waits up to [BusyTimeout] for the write
//     lock instead of failing at once;
//   - _journal_mode=WAL: readers and the one writer do not block each other,
//     and commits are cheaper. WAL needs a local file system; it makes the
//     -wal and -shm files beside the database.
//
// The path is a file name, not a URI: characters special in URIs (? # %)
// are escaped. Path [Memory] (":memory:") opens a private in-memory
// database instead: plain ":memory:" would give each pooled connection a
// database of its own, so Open names a shared one (SQLite's memdb VFS), new
// at every call, that all connections of the returned *sql.DB share. It
// lives while one of them is open, which Open ensures by keeping idle
// connections for good: do not set SetMaxIdleConns to 0, nor
// SetConnMaxLifetime or SetConnMaxIdleTime, on such a *sql.DB, or the
// database is dropped, with its events, when its connections are. It has
// no WAL, and is gone with the process.
//
// Open checks the database with a ping; the caller closes the *sql.DB.
// Tune its pool as usual: see the package documentation on SetMaxOpenConns.
func Open(ctx context.Context, path string) (*sql.DB, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: sqlite: empty database path", outbox.ErrInvalidRequest)
	}
	db, err := sql.Open(DriverName, dsn(path))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxIdleConns(idleConns)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return db, nil
}

// dsn is the data source name Open gives the driver for path.
func dsn(path string) string {
	params := "_busy_timeout=" + strconv.FormatInt(BusyTimeout.Milliseconds(), 10) + "&_txlock=immediate"
	if path == Memory {
		return fmt.Sprintf("file:/wmoutbox-memory-%d?vfs=memdb&%s", memoryDatabases.Add(1), params)
	}
	return fileURI(path) + "?" + params + "&_journal_mode=WAL"
}

// fileURI is the SQLite URI of a file path: "file:" and the path, with the
// characters that would end or escape it percent-encoded.
func fileURI(path string) string {
	escaped := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	if strings.HasPrefix(escaped, "/") {
		// An empty authority, so that "//x" stays a path, not a host.
		return "file://" + escaped
	}
	return "file:" + escaped
}
