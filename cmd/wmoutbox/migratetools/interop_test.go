package migratetools_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	migratemysql "github.com/golang-migrate/migrate/v4/database/mysql"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver of database/sql, for the tools
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/migrationfiles"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/internal/testmysql"
	"github.com/wmoutbox/wmoutbox/outbox"
	wmmysql "github.com/wmoutbox/wmoutbox/outbox/mysql"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
)

// table is the outbox table the tests migrate: not the default, so that
// the rendering of names is checked too.
const table = "shop_outbox"

// dialect is what a test needs of a dialect: a fresh empty database, for
// the tools as a *sql.DB, and the library's view of it.
type dialect struct {
	name string
	// open makes an empty database of the test's own, and returns what
	// opens a new *sql.DB on it, for a tool, and the library's operations
	// on it.
	open func(t *testing.T) (func() *sql.DB, library)
	// gooseDialect names the dialect for goose; migrateDriver wraps a
	// database for golang-migrate.
	gooseDialect  goose.Dialect
	migrateDriver func(db *sql.DB) (database.Driver, error)
	scripts       func() ([]migrationfiles.Script, error)
	// leftovers lists the tables and other objects of the database.
	objects string
}

// library is the dialect's migration API and store on the database.
type library struct {
	applied   func(ctx context.Context) ([]migrationfiles.Applied, error)
	migrate   func(ctx context.Context) error
	roundTrip func(t *testing.T)
}

var dialects = []dialect{
	{
		name: "postgres",
		open: func(t *testing.T) (func() *sql.DB, library) {
			url := testdb.EmptyURL(t)
			pool, err := pgxpool.New(t.Context(), url)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			cfg := postgres.Config{Table: table}
			return opener(t, "pgx", url), library{
				applied: func(ctx context.Context) ([]migrationfiles.Applied, error) {
					return postgres.AppliedMigrations(ctx, pool, cfg)
				},
				migrate: func(ctx context.Context) error { return postgres.Migrate(ctx, pool, cfg) },
				roundTrip: func(t *testing.T) {
					store, err := postgres.NewStore(pool, cfg)
					require.NoError(t, err)
					roundTrip(t, store)
				},
			}
		},
		gooseDialect: goose.DialectPostgres,
		migrateDriver: func(db *sql.DB) (database.Driver, error) {
			return migratepgx.WithInstance(db, &migratepgx.Config{})
		},
		scripts: func() ([]migrationfiles.Script, error) {
			return postgres.MigrationScripts(postgres.Config{Table: table})
		},
		objects: `SELECT relname FROM pg_class
			WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'S', 'i', 'v') ORDER BY relname`,
	},
	{
		name: "mysql",
		open: func(t *testing.T) (func() *sql.DB, library) {
			cfg, err := mysql.ParseDSN(testmysql.EmptyDSN(t))
			require.NoError(t, err)
			// golang-migrate sends each file in one Exec: it needs
			// multiStatements; goose sends one statement at a time.
			cfg.MultiStatements = true
			db, err := testmysql.Open(cfg.FormatDSN())
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			wcfg := wmmysql.Config{Table: table}
			return opener(t, "mysql", cfg.FormatDSN()), library{
				applied: func(ctx context.Context) ([]migrationfiles.Applied, error) {
					return wmmysql.AppliedMigrations(ctx, db, wcfg)
				},
				migrate: func(ctx context.Context) error { return wmmysql.Migrate(ctx, db, wcfg) },
				roundTrip: func(t *testing.T) {
					store, err := wmmysql.NewStore(db, wcfg)
					require.NoError(t, err)
					roundTrip(t, store)
				},
			}
		},
		gooseDialect: goose.DialectMySQL,
		migrateDriver: func(db *sql.DB) (database.Driver, error) {
			return migratemysql.WithInstance(db, &migratemysql.Config{})
		},
		scripts: func() ([]migrationfiles.Script, error) { return wmmysql.MigrationScripts(wmmysql.Config{Table: table}) },
		objects: `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()
			UNION ALL SELECT DISTINCT index_name FROM information_schema.statistics WHERE table_schema = DATABASE()`,
	},
	{
		name: "sqlite",
		open: func(t *testing.T) (func() *sql.DB, library) {
			path := filepath.Join(t.TempDir(), "outbox.db")
			db, err := sqlite.Open(t.Context(), path)
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			cfg := sqlite.Config{Table: table}
			return opener(t, sqlite.DriverName, path), library{
				applied: func(ctx context.Context) ([]migrationfiles.Applied, error) {
					return sqlite.AppliedMigrations(ctx, db, cfg)
				},
				migrate: func(ctx context.Context) error { return sqlite.Migrate(ctx, db, cfg) },
				roundTrip: func(t *testing.T) {
					store, err := sqlite.NewStore(db, cfg)
					require.NoError(t, err)
					roundTrip(t, store)
				},
			}
		},
		gooseDialect: goose.DialectSQLite3,
		migrateDriver: func(db *sql.DB) (database.Driver, error) {
			return migratesqlite.WithInstance(db, &migratesqlite.Config{})
		},
		scripts: func() ([]migrationfiles.Script, error) { return sqlite.MigrationScripts(sqlite.Config{Table: table}) },
		objects: `SELECT name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' ORDER BY name`,
	},
}

// opener returns what opens a *sql.DB on dsn with driver; the caller
// closes it.
func opener(t *testing.T, driver, dsn string) func() *sql.DB {
	return func() *sql.DB {
		db, err := sql.Open(driver, dsn)
		require.NoError(t, err)
		return db
	}
}

// roundTrip writes an event with a store on the migrated table and reads
// it back.
func roundTrip[Tx any](t *testing.T, store *outbox.Store[Tx]) {
	t.Helper()
	ctx := t.Context()
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	var ids []string
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx Tx) error {
		ids, err = writer.Write(ctx, tx, outbox.NewJSON("OrderCreated", []byte(`{"order":1}`)))
		return err
	}))
	require.Len(t, ids, 1)
	event, err := store.Get(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, ids[0], event.ID)
	require.JSONEq(t, `{"order":1}`, string(event.Payload()))
	require.Equal(t, outbox.StatusNew, event.Status)
}

// filesFS holds files in the folder migrations.
func filesFS(files []migrationfiles.File) fstest.MapFS {
	fsys := fstest.MapFS{}
	for _, f := range files {
		fsys["migrations/"+f.Name] = &fstest.MapFile{Data: []byte(f.SQL)}
	}
	return fsys
}

// tool applies the up and down migrations of a format.
type tool struct {
	name  string
	files func(about string, scripts []migrationfiles.Script) []migrationfiles.File
	// up and down run the tool with the files on a database that open
	// opens.
	up, down func(t *testing.T, d dialect, open func() *sql.DB, fsys fstest.MapFS)
	// owns tells whether a database object is the tool's: the table where
	// it records what it applied, and that table's index and sequence.
	owns func(name string) bool
}

var tools = []tool{
	{
		name:  "goose",
		files: migrationfiles.GooseFiles,
		up: func(t *testing.T, d dialect, open func() *sql.DB, fsys fstest.MapFS) {
			results, err := gooseProvider(t, d, open, fsys).Up(t.Context())
			require.NoError(t, err)
			require.Len(t, results, len(fsys))
		},
		down: func(t *testing.T, d dialect, open func() *sql.DB, fsys fstest.MapFS) {
			results, err := gooseProvider(t, d, open, fsys).DownTo(t.Context(), 0)
			require.NoError(t, err)
			require.Len(t, results, len(fsys))
		},
		owns: func(name string) bool { return strings.HasPrefix(name, "goose_db_version") },
	},
	{
		name:  "golang-migrate",
		files: migrationfiles.GolangMigrateFiles,
		up: func(t *testing.T, d dialect, open func() *sql.DB, fsys fstest.MapFS) {
			require.NoError(t, golangMigrate(t, d, open, fsys).Up())
		},
		down: func(t *testing.T, d dialect, open func() *sql.DB, fsys fstest.MapFS) {
			require.NoError(t, golangMigrate(t, d, open, fsys).Down())
		},
		owns: func(name string) bool {
			// version_unique: the index of its table on SQLite.
			return strings.HasPrefix(name, "schema_migrations") || name == "version_unique"
		},
	},
}

// gooseProvider returns a goose provider with the files, on a database
// of its own, closed at cleanup.
func gooseProvider(t *testing.T, d dialect, open func() *sql.DB, fsys fstest.MapFS) *goose.Provider {
	t.Helper()
	sub, err := fsys.Sub("migrations")
	require.NoError(t, err)
	p, err := goose.NewProvider(d.gooseDialect, open(), sub, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

// golangMigrate returns a migrator with the files on a database of its
// own, closed at cleanup.
func golangMigrate(t *testing.T, d dialect, open func() *sql.DB, fsys fstest.MapFS) *migrate.Migrate {
	t.Helper()
	source, err := iofs.New(fsys, "migrations")
	require.NoError(t, err)
	driver, err := d.migrateDriver(open())
	require.NoError(t, err)
	m, err := migrate.NewWithInstance("iofs", source, d.name, driver)
	require.NoError(t, err)
	t.Cleanup(func() {
		sourceErr, dbErr := m.Close()
		require.NoError(t, errors.Join(sourceErr, dbErr))
	})
	return m
}

func TestToolsMigrateAsMigrateDoes(t *testing.T) {
	t.Parallel()
	for _, tl := range tools {
		for _, d := range dialects {
			t.Run(tl.name+"/"+d.name, func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				open, lib := d.open(t)
				scripts, err := d.scripts()
				require.NoError(t, err)
				fsys := filesFS(tl.files("the "+d.name+" table "+table, scripts))

				tl.up(t, d, open, fsys)

				applied, err := lib.applied(ctx)
				require.NoError(t, err)
				require.Len(t, applied, len(scripts))
				for i, a := range applied {
					require.Equal(t, scripts[i].Version, a.Version)
					require.Equal(t, scripts[i].Name, a.Name)
					require.False(t, a.AppliedAt.IsZero())
				}
				// Migrate finds nothing to do: it would fail creating a
				// table again, or recording a version twice.
				require.NoError(t, lib.migrate(ctx))
				again, err := lib.applied(ctx)
				require.NoError(t, err)
				require.Equal(t, applied, again)

				lib.roundTrip(t)

				tl.down(t, d, open, fsys)
				applied, err = lib.applied(ctx)
				require.NoError(t, err)
				require.Empty(t, applied)
				db := open()
				defer db.Close()
				objects := queryStrings(t, db, d.objects)
				objects = slices.DeleteFunc(objects, func(name string) bool {
					return tl.owns(name) || strings.HasPrefix(name, "wmoutbox_migration") || name == "PRIMARY"
				})
				require.Empty(t, objects, "left after the down migrations")
			})
		}
	}
}

func queryStrings(t *testing.T, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), query)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}
