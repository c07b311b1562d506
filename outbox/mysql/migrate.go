package mysql

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

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

// MigrateLockTimeout is how long [Migrate] waits for another migrator of
// the same table before it returns [ErrMigrationLocked].
const MigrateLockTimeout = time.Minute

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
// scripts for another migration tool (goose, golang-migrate, the mysql client), in version
// order. Each script's Up creates the wmoutbox_migration table when it is
// missing, applies its migration and records it there, as [Migrate] does;
// its Down undoes the migration and deletes the record. A table migrated
// by the scripts is then one that [Migrate] finds up to date and
// [AppliedMigrations] reads, and the other way round.
// The scripts take no lock: run them from one process. Every statement
// of an Up can run again (CREATE TABLE IF NOT EXISTS, DROP TABLE IF
// EXISTS), as [Migrate]'s can.
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
		return nil, fmt.Errorf("mysql: %w", err)
	}
	return scripts, nil
}

// AppliedMigrations returns the migrations recorded applied to cfg's
// table in the wmoutbox_migration table beside it, in version order: none,
// and no error, when that table does not exist. Versions beyond those of
// [Migrations] are migrations of a later wmoutbox.
func AppliedMigrations(ctx context.Context, db *sql.DB, cfg Config) ([]AppliedMigration, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: mysql AppliedMigrations needs a database", outbox.ErrInvalidRequest)
	}
	t, err := newTable(cfg)
	if err != nil {
		return nil, err
	}
	applied, err := sqlcodec.AppliedMigrations(ctx, db, sqlMigrationTableExists, t.sql.appliedMigrations, t.Name)
	if err != nil {
		return nil, fmt.Errorf("mysql: applied migrations: %w", err)
	}
	return applied, nil
}

// Migrate applies the migrations cfg's table lacks, in the database of
// db's connections, and records each in the wmoutbox_migration table beside
// it. MySQL commits every DDL statement on its own, so migrations are not
// applied in one transaction: migrators of one table take turns on a named
// lock of the server (GET_LOCK), each migration is recorded once applied,
// and every statement of a migration can run again (CREATE TABLE IF NOT
// EXISTS), so that a migration cut short is applied again from its start.
// It is safe to call at every start.
func Migrate(ctx context.Context, db *sql.DB, cfg Config) error {
	if db == nil {
		return fmt.Errorf("%w: mysql Migrate needs a database", outbox.ErrInvalidRequest)
	}
	t, err := newTable(cfg)
	if err != nil {
		return err
	}
	migrations, err := t.migrations()
	if err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("mysql: migrate: %w", err)
	}
	defer conn.Close()
	lock := "wmoutbox:" + t.Name
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, sqlLock, lock, int(MigrateLockTimeout/time.Second)).Scan(&got); err != nil {
		return fmt.Errorf("mysql: migrate: lock: %w", err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("%w %s (waited %s)", ErrMigrationLocked, t.Name, MigrateLockTimeout)
	}
	defer func() {
		// The lock is the session's: a connection that cannot release it
		// is closed rather than returned to the pool still holding it.
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), sqlUnlock, lock); err != nil {
			_ = conn.Raw(func(any) error { return sqldriver.ErrBadConn })
		}
	}()
	return t.migrate(ctx, conn, migrations, cfg)
}

func (t *table) migrate(ctx context.Context, conn *sql.Conn, migrations []Migration, cfg Config) error {
	if _, err := conn.ExecContext(ctx, t.sql.createMigrationTable); err != nil {
		return fmt.Errorf("mysql: migrate: create %s: %w", ident.MigrationTable, err)
	}
	var applied int
	if err := conn.QueryRowContext(ctx, t.sql.migrationVersion, t.Name).Scan(&applied); err != nil {
		return fmt.Errorf("mysql: migrate: read version: %w", err)
	}
	for _, m := range migrations {
		if m.Version <= applied {
			continue
		}
		for _, stmt := range statementsOf(m.SQL) {
			if _, err := conn.ExecContext(ctx, stmt); err != nil && !alreadyApplied(err) {
				return fmt.Errorf("mysql: migrate %s to version %d (%s): %w", t.Name, m.Version, m.Name, err)
			}
		}
		if _, err := conn.ExecContext(ctx, t.sql.recordMigration, t.Name, m.Version, m.Name, sqlcodec.AppliedAt(cfg.Clock)); err != nil {
			return fmt.Errorf("mysql: migrate: record version %d: %w", m.Version, err)
		}
	}
	return nil
}

// alreadyApplied reports the error of an ALTER TABLE that a migration cut
// short applied before: a duplicate column or key. MySQL has no ADD
// COLUMN IF NOT EXISTS (MariaDB has), and an ALTER TABLE is applied whole
// or not at all, so that such an error means the whole statement was.
func alreadyApplied(err error) bool {
	var e *mysqldriver.MySQLError
	return errors.As(err, &e) && (e.Number == erDupFieldName || e.Number == erDupKeyName)
}

// statementsOf splits a migration file into its statements, which the
// driver sends one at a time (it sends several only with multiStatements,
// a setting of the caller's DSN): a statement ends with a line whose SQL,
// before any -- comment, ends with a semicolon. Comments stay with the
// statement they precede; a part that holds nothing else is dropped.
func statementsOf(file string) []string {
	var (
		out     []string
		current strings.Builder
		hasSQL  bool
	)
	for line := range strings.Lines(file) {
		current.WriteString(line)
		code, _, _ := strings.Cut(line, "--") // the files hold no "--" in a string
		code = strings.TrimSpace(code)
		if code == "" {
			continue
		}
		hasSQL = true
		if strings.HasSuffix(code, ";") {
			out = append(out, strings.TrimSpace(current.String()))
			current.Reset()
			hasSQL = false
		}
	}
	if hasSQL {
		out = append(out, strings.TrimSpace(current.String()))
	}
	return out
}

func (t *table) migrations() ([]Migration, error) {
	migrations, err := migrationfiles.Load(migrationFiles, "migrations", t.rename)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	return migrations, nil
}

// rename gives the configured name for the default table (suffix "") and
// for the index names derived from it.
func (t *table) rename(suffix string) string {
	return quote(t.Name + suffix)
}
