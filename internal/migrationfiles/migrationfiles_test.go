package migrationfiles_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/migrationfiles"
)

func TestLoadDowns(t *testing.T) {
	t.Parallel()
	keep := func(suffix string) string { return "t" + suffix }
	fsys := fstest.MapFS{
		"m/0001_a.sql":      {Data: []byte("CREATE TABLE outbox_event (x int);")},
		"m/0002_b.sql":      {Data: []byte("CREATE INDEX outbox_event_x_idx ON outbox_event (x);")},
		"m/down/0001_a.sql": {Data: []byte("DROP TABLE outbox_event;")},
	}
	migrations, err := migrationfiles.Load(fsys, "m", keep)
	require.NoError(t, err)
	require.Len(t, migrations, 2)
	require.Equal(t, "DROP TABLE t;", migrations[0].Down)
	require.Empty(t, migrations[1].Down)

	_, err = migrationfiles.Scripts(migrations, "t", migrationfiles.Recorder{})
	require.ErrorContains(t, err, "migration 0002_b.sql has no down migration (down/0002_b.sql)")

	fsys["m/down/0003_c.sql"] = &fstest.MapFile{Data: []byte("DROP TABLE x;")}
	_, err = migrationfiles.Load(fsys, "m", keep)
	require.ErrorContains(t, err, "down migration 0003_c.sql undoes no migration")
}

func TestScripts(t *testing.T) {
	t.Parallel()
	migrations := []migrationfiles.Migration{{Version: 1, Name: "0001_a.sql", SQL: "CREATE TABLE t (x int);\n", Down: "DROP TABLE t"}}
	scripts, err := migrationfiles.Scripts(migrations, "t", migrationfiles.Recorder{
		CreateTable: "CREATE TABLE IF NOT EXISTS m (x int)",
		Record:      "INSERT INTO m VALUES ({table_name}, {version}, {file})",
		Unrecord:    "DELETE FROM m WHERE t = {table_name} AND v = {version}",
	})
	require.NoError(t, err)
	require.Equal(t, []migrationfiles.Script{{
		Version: 1,
		Name:    "0001_a.sql",
		Up: "CREATE TABLE IF NOT EXISTS m (x int);\n\n" +
			"CREATE TABLE t (x int);\n\n" +
			"INSERT INTO m VALUES ('t', 1, '0001_a.sql');\n",
		Down: "DROP TABLE t;\n\nDELETE FROM m WHERE t = 't' AND v = 1;\n",
	}}, scripts)
}

func TestLiteral(t *testing.T) {
	t.Parallel()
	require.Equal(t, `'it''s'`, migrationfiles.Literal("it's"))
}

func TestSplit(t *testing.T) {
	t.Parallel()
	type st = migrationfiles.Statement
	tests := []struct {
		name, script string
		want         []st
	}{
		{"empty", "", nil},
		{"comments only", "-- a;\n/* b; */\n", nil},
		{"two", "CREATE TABLE a (x int);\n\nDROP TABLE b;\n", []st{{Text: "CREATE TABLE a (x int);"}, {Text: "DROP TABLE b;"}}},
		{"leading comment kept", "-- makes a\nCREATE TABLE a (x int); -- trailing\n", []st{{Text: "-- makes a\nCREATE TABLE a (x int);"}}},
		{"comment semicolon", "-- x; y\nSELECT 1;", []st{{Text: "-- x; y\nSELECT 1;"}}},
		{"string", "SELECT 'a;b', 'it''s;';", []st{{Text: "SELECT 'a;b', 'it''s;';", Nested: true}}},
		{"quoted identifier", `SELECT "a;b";`, []st{{Text: `SELECT "a;b";`, Nested: true}}},
		{"backquote", "SELECT `a;b`;", []st{{Text: "SELECT `a;b`;", Nested: true}}},
		{"block comment", "SELECT /* ; */ 1;", []st{{Text: "SELECT /* ; */ 1;", Nested: true}}},
		{
			"do block", "DO $$\nBEGIN\n  PERFORM 1;\nEND\n$$;\nSELECT 2;",
			[]st{{Text: "DO $$\nBEGIN\n  PERFORM 1;\nEND\n$$;", Nested: true}, {Text: "SELECT 2;"}},
		},
		{
			"tagged function", "CREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql;",
			[]st{{Text: "CREATE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql;", Nested: true}},
		},
		{"parameter is no dollar quote", "SELECT $1; SELECT a$b$;", []st{{Text: "SELECT $1;"}, {Text: "SELECT a$b$;"}}},
		{"no final semicolon", "SELECT 1;\nSELECT 2\n-- end\n", []st{{Text: "SELECT 1;"}, {Text: "SELECT 2\n-- end"}}},
		{"unterminated quote", "SELECT 'a;", []st{{Text: "SELECT 'a;", Nested: true}}},
		{"unterminated dollar", "SELECT $$a;", []st{{Text: "SELECT $$a;", Nested: true}}},
		{"unterminated comment", "SELECT 1 /* a", []st{{Text: "SELECT 1 /* a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, migrationfiles.Split(tt.script))
		})
	}
}

func FuzzSplit(f *testing.F) {
	f.Add("SELECT 'a;b'; DO $x$ ; $x$; -- c;\n/* d; */ SELECT 1")
	f.Fuzz(func(t *testing.T, script string) {
		var joined strings.Builder
		for _, s := range migrationfiles.Split(script) {
			require.NotEmpty(t, s.Text)
			joined.WriteString(s.Text)
		}
		// Statements are in order and keep their text: only blank space
		// and trailing comments go.
		require.LessOrEqual(t, len(strings.Join(strings.Fields(joined.String()), "")), len(strings.Join(strings.Fields(script), "")))
	})
}

func TestGooseFiles(t *testing.T) {
	t.Parallel()
	files := migrationfiles.GooseFiles("the postgres table t", []migrationfiles.Script{{
		Version: 7, Name: "0007_f.sql",
		Up:   "CREATE TABLE a (x int);\n\n-- f\nDO $$ BEGIN PERFORM 1; END $$;\n",
		Down: "DROP TABLE a;\n",
	}})
	require.Equal(t, []migrationfiles.File{{Name: "0007_f.sql", SQL: `-- wmoutbox migration 7 (0007_f.sql), up and down, for the postgres table t.
-- Written by ` + "`wmoutbox migrate sql`" + `; it records itself in wmoutbox_migration.

-- +goose Up
CREATE TABLE a (x int);

-- +goose StatementBegin
-- f
DO $$ BEGIN PERFORM 1; END $$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE a;
`}}, files)
}

func TestGolangMigrateFiles(t *testing.T) {
	t.Parallel()
	files := migrationfiles.GolangMigrateFiles("the sqlite table t", []migrationfiles.Script{{Version: 1, Name: "0001_a.sql", Up: "U;\n", Down: "D;\n"}})
	require.Len(t, files, 2)
	require.Equal(t, "0001_a.up.sql", files[0].Name)
	require.True(t, strings.HasSuffix(files[0].SQL, "\n\nU;\n"), files[0].SQL)
	require.Equal(t, "0001_a.down.sql", files[1].Name)
	require.True(t, strings.HasSuffix(files[1].SQL, "\n\nD;\n"), files[1].SQL)
}
