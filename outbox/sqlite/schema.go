package sqlite

import (
	"context"
	"strings"

	"github.com/wmoutbox/wmoutbox/internal/sqlcodec"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// schema checks the table: what an [outbox.NotMigratedError] of this
// dialect says to do.
var schema = sqlcodec.Schema{
	Dialect: "sqlite", Exists: sqlMigrationTableExists,
	Fix: "run sqlite.Migrate or `wmoutbox migrate up`",
}

var _ outboxdriver.SchemaChecker = (*driver)(nil)

// CheckSchema implements [outboxdriver.SchemaChecker].
func (d *driver) CheckSchema(ctx context.Context) error {
	migrations, err := d.t.migrations()
	if err != nil {
		return err
	}
	s := schema
	s.List = d.t.sql.appliedMigrations
	return s.Check(ctx, d.db, &d.t.Table, migrations)
}

// notMigrated returns err as an [outbox.NotMigratedError] when SQLite
// says "no such table" (its error code, SQLITE_ERROR, is every kind of
// error's: the message is all that tells).
func (d *driver) notMigrated(err error) error {
	return schema.NotMigrated(&d.t.Table, err, func(err error) bool {
		return strings.Contains(err.Error(), "no such table")
	})
}
