package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// migrateFix is what an [outbox.NotMigratedError] of this dialect says to do.
const migrateFix = "run postgres.Migrate or `wmoutbox migrate up`"

var _ outboxdriver.SchemaChecker = (*driver)(nil)

// CheckSchema implements [outboxdriver.SchemaChecker]: the table exists
// (to_regclass), and the latest migration recorded for it, if any, is
// this package's latest.
func (d *driver) CheckSchema(ctx context.Context) error {
	var exists bool
	if err := d.db.QueryRow(ctx, sqlMigrationTableExists, d.t.qualified).Scan(&exists); err != nil {
		return fmt.Errorf("postgres: check table %s: %w", d.t.label(), err)
	}
	if !exists {
		return fmt.Errorf("postgres: check: %w", &outbox.NotMigratedError{Table: d.t.label(), Fix: migrateFix})
	}
	applied, err := d.t.applied(ctx, d.db)
	if err != nil {
		return fmt.Errorf("postgres: check table %s: %w", d.t.label(), err)
	}
	migrations, err := d.t.migrations()
	if err != nil {
		return err
	}
	return behind(d.t.label(), applied, migrations)
}

// behind returns a [*outbox.NotMigratedError] when applied, the migrations
// recorded for table, stop before the latest of migrations; none recorded
// is a table migrated by another tool, which passes.
func behind(table string, applied []AppliedMigration, migrations []Migration) error {
	if len(applied) == 0 || len(migrations) == 0 {
		return nil
	}
	last, needed := applied[len(applied)-1].Version, migrations[len(migrations)-1].Version
	if last >= needed {
		return nil
	}
	return fmt.Errorf("postgres: check: %w", &outbox.NotMigratedError{Table: table, Applied: last, Needed: needed, Fix: migrateFix})
}

// label names the table in messages: schema.name, or name.
func (t *table) label() string {
	if t.schema == "" {
		return t.name
	}
	return t.schema + "." + t.name
}

// notMigrated returns err as a [*outbox.NotMigratedError] when it is
// PostgreSQL's undefined_table (42P01), err itself otherwise.
func (t *table) notMigrated(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return &outbox.NotMigratedError{Table: t.label(), Fix: migrateFix, Err: err}
	}
	return err
}
