package mysql_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox/mysql"
)

// TestEveryMigrationHasItsDown fails when a migration has no down file,
// migrations/down/<the same name>, which undoes it: the scripts for goose
// and golang-migrate (MigrationScripts, wmoutbox migrate sql) need one.
func TestEveryMigrationHasItsDown(t *testing.T) {
	t.Parallel()
	migrations, err := mysql.Migrations(mysql.Config{})
	require.NoError(t, err)
	require.NotEmpty(t, migrations)
	for _, m := range migrations {
		require.NotEmptyf(t, strings.TrimSpace(m.Down),
			"outbox/mysql/migrations/%s has no down migration: write outbox/mysql/migrations/down/%s, which undoes it", m.Name, m.Name)
	}
	scripts, err := mysql.MigrationScripts(mysql.Config{})
	require.NoError(t, err)
	require.Len(t, scripts, len(migrations))
}
