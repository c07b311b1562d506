package sqlite

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"embed"
	"fmt"

	"github.com/wmoutbox/wmoutbox/internal/ident"
	"github.com/wmoutbox/wmoutbox/internal/migrationfiles"
	"github.com/wmoutbox/wmoutbox/internal/sqlcodec"
	"github.com/wmoutbox/wmoutbox/outbox"
)

//go:embed migrations/*.sql migrations/down/*.sql
var migrationFiles embed.FS

// Migration is one schema change, rendered for a configured table, with
// the SQL that undoes it.
type Migration = migrationfiles.Migration

// AppliedMigration is a migration recorded applied to a table, as
// [AppliedMigrations] reads it.
type AppliedMigration = migrationfiles.Applied

// MigrationScript is a migration written for another migration tool, as
// [MigrationScripts] renders it.
type MigrationScript = migrationfiles.Script

// Migrations returns the schema migrations rendered for cfg's table, for
// use with your own migration tool. The same files, written for the
// default table name, are in this package's migrations folder.
func Migrations(cfg Config) ([]Migration, error) {
	t, err := newTable(cfg)
	if err != nil {
		return nil, err
	}
	return t.migrations()
}

// MigrationScripts returns the migrations rendered for cfg's table as
// scripts for another migration tool (goose, golang-migrate, the sqlite3 shell), in version
// order. Each script's Up creates the wmoutbox_migration table when it is
// missing, applies its migration and records it there, as [Migrate] does;
// its Down undoes the migration and deletes the record. A table migrated
// by the scripts is then one that [Migrate] finds up to date and
// [AppliedMigrations] reads, and the other way round.
// The scripts take no lock: run them from one process.
func MigrationScripts(cfg Config) ([]MigrationScript, error) {
	t, err := newTable(cfg)
	if err != nil {
		return nil, err
	}
	migrations, err := t.migrations()
	if err != nil {
		return nil, err
	}
	scripts, err := migrationfiles.Scripts(migrations, t.Name, t.sql.script)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return scripts, nil
}

// AppliedMigrations returns the migrations recorded applied to cfg's
// table in the wmoutbox_migration table beside it, in version order: none,
// and no error, when that table does not exist. Versions beyond those of
// [Migrations] are migrations of a later wmoutbox.
func AppliedMigrations(ctx context.Context, db *sql.DB, cfg Config) ([]AppliedMigration, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sqlite AppliedMigrations needs a database", outbox.ErrInvalidRequest)
	}
	t, err := newTable(cfg)
	if err != nil {
		return nil, err
	}
	applied, err := sqlcodec.AppliedMigrations(ctx, db, sqlMigrationTableExists, t.sql.appliedMigrations, t.Name)
	if err != nil {
		return nil, fmt.Errorf("sqlite: applied migrations: %w", err)
	}
	return applied, nil
}

// Migrate applies the migrations cfg's table lacks, in one transaction on
// a connection of db, and records them in the wmoutbox_migration table
// beside it. The transaction is BEGIN IMMEDIATE: it holds SQLite's write
// lock from the start, so processes that start together take turns (each
// waiting up to the busy timeout of a database opened with [Open]; with
// none set, the later ones fail at once) and apply each migration once.
// It is safe to call at every start.
func Migrate(ctx context.Context, db *sql.DB, cfg Config) error {
	if db == nil {
		return fmt.Errorf("%w: sqlite Migrate needs a database", outbox.ErrInvalidRequest)
	}
	t, err := newTable(cfg)
	if err != nil {
		return err
	}
	return gateOf(db).write(ctx, "migrate", func() error {
		conn, err := db.Conn(ctx)
		if err != nil {
			return fmt.Errorf("sqlite: migrate: %w", err)
		}
		defer conn.Close()
		return immediate(ctx, conn, func() error { return t.migrate(ctx, conn, cfg) })
	})
}

// MigrateTx is [Migrate] inside the caller's transaction, which the caller
// commits. Begin it on a database from [Open] (whose transactions are
// IMMEDIATE): in a deferred transaction, a migrator that read the version
// while another one was writing fails with SQLITE_BUSY instead of waiting.
func MigrateTx(ctx context.Context, tx *sql.Tx, cfg Config) error {
	if tx == nil {
		return fmt.Errorf("%w: sqlite MigrateTx needs a transaction", outbox.ErrInvalidRequest)
	}
	t, err := newTable(cfg)
	if err != nil {
		return err
	}
	return t.migrate(ctx, tx, cfg)
}

// execer is what a migration runs on: *sql.Conn or *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (t *table) migrate(ctx context.Context, db execer, cfg Config) error {
	migrations, err := t.migrations()
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, t.sql.createMigrationTable); err != nil {
		return fmt.Errorf("sqlite: migrate: create %s: %w", ident.MigrationTable, err)
	}
	var applied int
	if err := db.QueryRowContext(ctx, t.sql.migrationVersion, t.Name).Scan(&applied); err != nil {
		return fmt.Errorf("sqlite: migrate: read version: %w", err)
	}
	appliedAt := sqlcodec.AppliedAt(cfg.Clock)
	for _, m := range migrations {
		if m.Version <= applied {
			continue
		}
		if _, err := db.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("sqlite: migrate %s to version %d (%s): %w", t.Name, m.Version, m.Name, err)
		}
		if _, err := db.ExecContext(ctx, t.sql.recordMigration, t.Name, m.Version, m.Name, appliedAt); err != nil {
			return fmt.Errorf("sqlite: migrate: record version %d: %w", m.Version, err)
		}
	}
	return nil
}

// immediate runs fn in a BEGIN IMMEDIATE transaction on conn and commits
// it when fn returns nil. database/sql cannot ask for IMMEDIATE per
// transaction, so the statements are sent by hand; a connection left inside
// a transaction (a failed rollback) is discarded, never returned to the
// pool.
func immediate(ctx context.Context, conn *sql.Conn, fn func() error) error {
	if _, err := conn.ExecContext(ctx, sqlBeginImmediate); err != nil {
		return fmt.Errorf("sqlite: begin immediate: %w", err)
	}
	committed := false
	defer func() {
		if committed {
			return
		}
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), sqlRollback); err != nil {
			_ = conn.Raw(func(any) error { return sqldriver.ErrBadConn })
		}
	}()
	if err := fn(); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, sqlCommit); err != nil {
		return fmt.Errorf("sqlite: commit: %w", err)
	}
	committed = true
	return nil
}

func (t *table) migrations() ([]Migration, error) {
	migrations, err := migrationfiles.Load(migrationFiles, "migrations", t.rename)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return migrations, nil
}

// rename gives the configured name for the default table (suffix "") and
// for the index names derived from it, which are never schema-qualified.
func (t *table) rename(suffix string) string {
	if suffix == "" {
		return t.Quoted
	}
	return ident.Quote(t.Name + suffix)
}
