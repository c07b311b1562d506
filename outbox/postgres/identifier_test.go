package postgres

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// plainIdentifier is the rule ValidateIdentifier documents, written out
// independently of its implementation.
var plainIdentifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

func TestValidateIdentifier(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		ident string
		max   int
		ok    bool
	}{
		{"default table", "outbox_event", maxTableLen, true},
		{"one letter", "t", maxTableLen, true},
		{"underscore only", "_", maxTableLen, true},
		{"leading underscore", "_outbox", maxTableLen, true},
		{"digits after the first", "outbox2_v10", maxTableLen, true},
		{"at the table limit", strings.Repeat("t", maxTableLen), maxTableLen, true},
		{"over the table limit", strings.Repeat("t", maxTableLen+1), maxTableLen, false},
		{"at the schema limit", strings.Repeat("s", maxSchemaLen), maxSchemaLen, true},
		{"over the schema limit", strings.Repeat("s", maxSchemaLen+1), maxSchemaLen, false},
		{"empty", "", maxTableLen, false},
		{"uppercase", "Outbox", maxTableLen, false},
		{"all uppercase", "OUTBOX", maxTableLen, false},
		{"leading digit", "1outbox", maxTableLen, false},
		{"only digits", "123", maxTableLen, false},
		{"double quote", `out"box`, maxTableLen, false},
		{"quoted", `"outbox"`, maxTableLen, false},
		{"single quote", "out'box", maxTableLen, false},
		{"injection", "a;DROP TABLE x", maxTableLen, false},
		{"comment", "a--", maxTableLen, false},
		{"space", "outbox event", maxTableLen, false},
		{"trailing space", "outbox ", maxTableLen, false},
		{"trailing newline", "outbox\n", maxTableLen, false},
		{"hyphen", "outbox-event", maxTableLen, false},
		{"dot", "public.outbox", maxTableLen, false},
		{"dollar", "outbox$1", maxTableLen, false},
		{"unicode letter", "événement", maxTableLen, false},
		{"unicode lookalike", "outbox_evеnt", maxTableLen, false}, // Cyrillic е
		{"NUL", "outbox\x00", maxTableLen, false},
		{"invalid UTF-8", "outbox\xff", maxTableLen, false},
		{"SQLite's prefix", "sqlite_outbox", maxTableLen, false},
		{"PostgreSQL's prefix", "pg_outbox", maxSchemaLen, false},
		{"a prefix inside", "outbox_pg_sqlite_", maxTableLen, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			err := ValidateIdentifier(tt.ident, tt.max)
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidIdentifier)
		})
	}
}

func FuzzIdentifier(f *testing.F) {
	for _, s := range []string{
		"outbox_event", "_", "t9", "Outbox", "9t", `a"b`, "a;DROP TABLE x", "a b", "é", "a\x00", "\xff",
		strings.Repeat("x", maxSchemaLen), strings.Repeat("x", maxSchemaLen+1),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		for _, max := range []int{maxTableLen, maxSchemaLen} {
			err := ValidateIdentifier(name, max)
			plain := plainIdentifier.MatchString(name) && len(name) <= max
			if err != nil {
				require.ErrorIs(t, err, ErrInvalidIdentifier)
				require.False(t, plain, "a plain identifier of %d bytes was rejected: %q", len(name), name)
				continue
			}
			require.True(t, plain, "accepted %q", name)
			require.Equal(t, `"`+name+`"`, pgx.Identifier{name}.Sanitize(), "quoting an accepted name changes nothing inside it")
			require.Equal(t, len(name), utf8.RuneCountInString(name))
		}
	})
}

func TestMigrations(t *testing.T) {
	t.Parallel()

	migrations, err := Migrations(Config{Schema: "s", Table: "t"})
	require.NoError(t, err)
	require.NotEmpty(t, migrations)
	for i, m := range migrations {
		require.Equal(t, i+1, m.Version)
		require.True(t, strings.HasSuffix(m.Name, ".sql"), m.Name)
		require.NotContains(t, m.SQL, "outbox_event", "every occurrence of the default name is replaced")
	}

	first := migrations[0]
	require.Equal(t, "0001_create_outbox_event.sql", first.Name)
	require.Contains(t, first.SQL, `CREATE TABLE "s"."t" (`)
	require.Contains(t, first.SQL, `CREATE INDEX "t_due_idx" ON "s"."t"`)
	require.Contains(t, first.SQL, `CREATE INDEX "t_finished_idx" ON "s"."t"`)
	require.NotContains(t, first.SQL, `"s"."t_`, "index names are never schema-qualified")

	inbox := migrations[2]
	require.Equal(t, "0003_create_inbox.sql", inbox.Name)
	require.Contains(t, inbox.SQL, `CREATE TABLE "s"."t_inbox" (`, "the inbox, a table, is in the schema")
	require.Contains(t, inbox.SQL, `CREATE INDEX "t_inbox_idx" ON "s"."t_inbox"`)

	groups := migrations[4]
	require.Equal(t, "0005_error_groups_and_leases.sql", groups.Name)
	require.Contains(t, groups.SQL, `CREATE INDEX IF NOT EXISTS "t_dead_group_idx" ON "s"."t"`)
	require.Contains(t, groups.SQL, `CREATE TABLE "s"."t_lease" (`, "the lease table, like the inbox, is in the schema")
}

func TestMigrationsDefaultTable(t *testing.T) {
	t.Parallel()

	migrations, err := Migrations(Config{})
	require.NoError(t, err)
	first := migrations[0]
	require.Contains(t, first.SQL, `CREATE TABLE "outbox_event" (`)
	require.Contains(t, first.SQL, `CREATE INDEX "outbox_event_due_idx" ON "outbox_event"`)
	require.Contains(t, first.SQL, `CREATE INDEX "outbox_event_finished_idx" ON "outbox_event"`)
}

func TestMigrationsNamesFitPostgres(t *testing.T) {
	t.Parallel()

	schema, table := strings.Repeat("s", maxSchemaLen), strings.Repeat("t", maxTableLen)
	migrations, err := Migrations(Config{Schema: schema, Table: table})
	require.NoError(t, err)

	quoted := regexp.MustCompile(`"([^"]*)"`)
	for _, m := range migrations {
		names := quoted.FindAllStringSubmatch(m.SQL, -1)
		require.NotEmpty(t, names)
		for _, n := range names {
			require.LessOrEqual(t, len(n[1]), 63, "PostgreSQL would cut %q", n[1])
		}
	}
}

func TestMigrationsInvalidIdentifier(t *testing.T) {
	t.Parallel()

	for _, cfg := range []Config{
		{Table: "Outbox"},
		{Table: "a;DROP TABLE x"},
		{Table: strings.Repeat("t", maxTableLen+1)},
		{Schema: "bad schema", Table: "t"},
		{Schema: `"s"`},
	} {
		migrations, err := Migrations(cfg)
		require.ErrorIs(t, err, ErrInvalidIdentifier, "%+v", cfg)
		require.Nil(t, migrations)
	}
}

// The identifier errors name the package once, then what the name is for:
// not "postgres: table: postgres: invalid identifier: ...".
func TestIdentifierErrorTexts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg  Config
		text string
	}{
		{Config{Table: "Outbox"}, `postgres: invalid identifier: table "Outbox" may hold only a-z, 0-9 and _, and not start with a digit`},
		{Config{Schema: "pg_catalog"}, `postgres: invalid identifier: schema "pg_catalog" starts with pg_, which a database keeps for itself`},
		{Config{Table: strings.Repeat("a", 49)}, `postgres: invalid identifier: table "` + strings.Repeat("a", 49) + `" must be 1 to 48 characters`},
	} {
		_, err := Migrations(tt.cfg)
		require.EqualError(t, err, tt.text)
		require.ErrorIs(t, err, ErrInvalidIdentifier)
	}
}
