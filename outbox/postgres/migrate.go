package postgres

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/wmoutbox/wmoutbox/internal/ident"
	"github.com/wmoutbox/wmoutbox/internal/migrationfiles"
	"github.com/wmoutbox/wmoutbox/internal/nilcheck"
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

// migrationLockKey serializes every wmoutbox migration on a server, so that
// processes starting together apply each migration once.
const migrationLockKey = int64(0x776d6f7574626f78) // "wmoutbox"

// Migrations returns the schema migrations rendered for cfg's schema and
// table, for use with your own migration tool. The same files, written for
// the default table name, are in this package's migrations folder.
func Migrations(cfg Config) ([]Migration, error) {
	t, err := newTable(cfg)
	if err != nil {
		return nil, err
	}
	return t.migrations()
}

// MigrationScripts returns the migrations rendered for cfg's schema and
// table as scripts for another migration tool (goose, golang-migrate,
// psql), in version order. Each script's Up creates the
// wmoutbox_migration table when it is missing, applies its migration and
// records it there, as [Migrate] does; its Down undoes the migration and
// deletes the record. A table migrated by the scripts is then one that
// [Migrate] finds up to date and [AppliedMigrations] reads, and the other
// way round. The scripts take no lock: run them from one process.
func MigrationScripts(cfg Config) ([]MigrationScript, error) {
	t, err := newTable(cfg)
	if err != nil {
		return nil, err
	}
	migrations, err := t.migrations()
	if err != nil {
		return nil, err
	}
	scripts, err := migrationfiles.Scripts(migrations, t.name, t.sql.script)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return scripts, nil
}

// AppliedMigrations returns the migrations recorded applied to cfg's
// table in the wmoutbox_migration table beside it, in version order: none,
// and no error, when that table does not exist. Versions beyond those of
// [Migrations] are migrations of a later wmoutbox.
func AppliedMigrations(ctx context.Context, db DB, cfg Config) ([]AppliedMigration, error) {
	if nilcheck.Is(db) {
		return nil, fmt.Errorf("%w: postgres AppliedMigrations needs a database", outbox.ErrInvalidRequest)
	}
	t, err := newTable(cfg)
	if err != nil {
		return nil, err
	}
	applied, err := t.applied(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("postgres: applied migrations: %w", err)
	}
	return applied, nil
}

// applied reads the migrations recorded applied to t, in version order:
// none when the migration table does not exist.
func (t *table) applied(ctx context.Context, db DB) ([]AppliedMigration, error) {
	var exists bool
	if err := db.QueryRow(ctx, sqlMigrationTableExists, t.sql.migrationTable).Scan(&exists); err != nil {
		return nil, err
	}
	if !exists {
		return nil, nil
	}
	rows, err := db.Query(ctx, t.sql.appliedMigrations, t.name)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (AppliedMigration, error) {
		var m AppliedMigration
		err := row.Scan(&m.Version, &m.Name, &m.AppliedAt)
		m.AppliedAt = m.AppliedAt.UTC()
		return m, err
	})
}

// Migrate applies the migrations cfg's table lacks, in one transaction on
// db, and records them in the wmoutbox_migration table beside it. It is
// safe to call at every start and from several processes at once: an
// advisory lock makes them take turns. The schema itself must exist. The
// transaction is READ COMMITTED whatever the server's default, when db
// can begin one with options (a pool or a connection can).
func Migrate(ctx context.Context, db DB, cfg Config) error {
	if nilcheck.Is(db) {
		return fmt.Errorf("%w: postgres Migrate needs a database", outbox.ErrInvalidRequest)
	}
	migrate := func(tx pgx.Tx) error { return MigrateTx(ctx, tx, cfg) }
	if db, ok := db.(interface {
		BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
	}); ok {
		return pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, migrate)
	}
	return pgx.BeginFunc(ctx, db, migrate)
}

// MigrateTx is [Migrate] inside the caller's transaction, which the caller
// commits. The advisory lock is held until then. The transaction must be
// READ COMMITTED (PostgreSQL's default; READ UNCOMMITTED, which PostgreSQL
// runs as READ COMMITTED, will do), or MigrateTx returns
// [outbox.ErrInvalidRequest]: a transaction with one snapshot would take
// it before waiting for the lock, miss the migrations of the process it
// waited for, and apply them again.
func MigrateTx(ctx context.Context, tx pgx.Tx, cfg Config) error {
	if nilcheck.Is(tx) {
		return fmt.Errorf("%w: postgres MigrateTx needs a transaction", outbox.ErrInvalidRequest)
	}
	t, err := newTable(cfg)
	if err != nil {
		return err
	}
	migrations, err := t.migrations()
	if err != nil {
		return err
	}
	var isolation string
	if err := tx.QueryRow(ctx, `SELECT current_setting('transaction_isolation')`).Scan(&isolation); err != nil {
		return fmt.Errorf("postgres: migrate: read isolation level: %w", err)
	}
	// PostgreSQL runs READ UNCOMMITTED as READ COMMITTED: a snapshot per
	// statement too.
	if isolation != "read committed" && isolation != "read uncommitted" {
		return fmt.Errorf("%w: migrations need a READ COMMITTED transaction, not %s", outbox.ErrInvalidRequest, isolation)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey); err != nil {
		return fmt.Errorf("postgres: migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, t.sql.createMigrationTable); err != nil {
		return fmt.Errorf("postgres: migrate: create %s: %w", ident.MigrationTable, err)
	}
	var applied int
	if err := tx.QueryRow(ctx, t.sql.migrationVersion, t.name).Scan(&applied); err != nil {
		return fmt.Errorf("postgres: migrate: read version: %w", err)
	}
	for _, m := range migrations {
		if m.Version <= applied {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("postgres: migrate %s to version %d (%s): %w", t.qualified, m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, t.sql.recordMigration, t.name, m.Version, m.Name); err != nil {
			return fmt.Errorf("postgres: migrate: record version %d: %w", m.Version, err)
		}
	}
	return nil
}

func (t *table) migrations() ([]Migration, error) {
	migrations, err := migrationfiles.Load(migrationFiles, "migrations", t.rename)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return migrations, nil
}

// sequenceSuffix names the sequence numbering the table's events (seq,
// migration 4) after the table.
const sequenceSuffix = "_seq"

// rename gives the configured name for the default table (suffix "") and
// for the names derived from it: the inbox table (suffix "_inbox"), the
// lease table (suffix "_lease") and the sequence (suffix "_seq"), in the
// same schema, and index names (suffix
// "…_idx"), which are never schema-qualified.
func (t *table) rename(suffix string) string {
	switch suffix {
	case "":
		return t.qualified
	case migrationfiles.InboxSuffix:
		return t.inbox
	case migrationfiles.LeaseSuffix:
		return t.lease
	case sequenceSuffix:
		return t.qualify(t.name + suffix)
	}
	return pgx.Identifier{t.name + suffix}.Sanitize()
}
