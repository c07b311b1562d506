package sqlcodec

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/wmoutbox/wmoutbox/internal/migrationfiles"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// Schema is what a database/sql dialect's check of its table needs:
// Exists counts the tables named by its one argument, List is the
// dialect's sqlAppliedMigrations, Fix what to run.
type Schema struct {
	Dialect string
	Exists  string
	List    string
	Fix     string
}

// Check is a database/sql dialect's outboxdriver.SchemaChecker: an
// [*outbox.NotMigratedError] when t does not exist, or when the
// migrations recorded for it stop before the latest of migrations; a table
// with no migration recorded (migrated by another tool) passes.
func (s Schema) Check(ctx context.Context, db *sql.DB, t *Table, migrations []migrationfiles.Migration) error {
	var n int
	if err := db.QueryRowContext(ctx, s.Exists, t.Name).Scan(&n); err != nil {
		return fmt.Errorf("%s: check table %s: %w", s.Dialect, t.Name, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: check: %w", s.Dialect, &outbox.NotMigratedError{Table: t.Name, Fix: s.Fix})
	}
	applied, err := AppliedMigrations(ctx, db, s.Exists, s.List, t.Name)
	if err != nil {
		return fmt.Errorf("%s: check table %s: %w", s.Dialect, t.Name, err)
	}
	if len(applied) == 0 || len(migrations) == 0 {
		return nil
	}
	last, needed := applied[len(applied)-1].Version, migrations[len(migrations)-1].Version
	if last >= needed {
		return nil
	}
	return fmt.Errorf("%s: check: %w", s.Dialect,
		&outbox.NotMigratedError{Table: t.Name, Applied: last, Needed: needed, Fix: s.Fix})
}

// NotMigrated returns err as an [*outbox.NotMigratedError] for t when
// missing reports it a missing table, err itself otherwise.
func (s Schema) NotMigrated(t *Table, err error, missing func(error) bool) error {
	if err != nil && missing(err) {
		return &outbox.NotMigratedError{Table: t.Name, Fix: s.Fix, Err: err}
	}
	return err
}
