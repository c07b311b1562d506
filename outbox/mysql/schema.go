package mysql

import (
	"context"
	"errors"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/wmoutbox/wmoutbox/internal/sqlcodec"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// schema checks the table: what an [outbox.NotMigratedError] of this
// dialect says to do.
var schema = sqlcodec.Schema{
	Dialect: "mysql", Exists: sqlMigrationTableExists,
	Fix: "run mysql.Migrate or `wmoutbox migrate up`",
}

// erNoSuchTable is MySQL's ER_NO_SUCH_TABLE.
const erNoSuchTable = 1146

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

// notMigrated returns err as an [outbox.NotMigratedError] when it is
// MySQL's ER_NO_SUCH_TABLE, err itself otherwise.
func (d *driver) notMigrated(err error) error {
	return schema.NotMigrated(&d.t.Table, err, func(err error) bool {
		var e *mysqldriver.MySQLError
		return errors.As(err, &e) && e.Number == erNoSuchTable
	})
}
