package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/migrationfiles"
)

var migrateCommand = &command{
	name:    "migrate",
	summary: "apply, list and write out the outbox table's migrations",
	sub: []*command{
		{
			name:    "up",
			summary: "apply the migrations the table lacks, and list them",
			help: `Applies the pending migrations with the dialect's Migrate, which records
each in the wmoutbox_migration table; safe to run at every deploy and
from several processes at once.`,
			setup: func(*flag.FlagSet) action { return migrateUp },
		},
		{
			name:    "status",
			summary: "list every migration, applied (and when) or pending",
			setup:   func(*flag.FlagSet) action { return migrateStatus },
		},
		{
			name:    "sql",
			args:    "[--format plain|goose|golang-migrate] [--out DIR]",
			summary: "write the migrations out as SQL, for psql or your migration tool",
			help: `Renders the migrations for the dialect of --database-url (which is not
connected to) and the configured --schema and --table:

  plain           one script, as Migrate runs it, records included
  goose           NNNN_name.sql per migration, with -- +goose Up and Down
  golang-migrate  NNNN_name.up.sql and NNNN_name.down.sql per migration

Every up script also creates the wmoutbox_migration table when it is
missing and records its migration there (a no-op when recorded), and every
down script deletes the record, so that "wmoutbox migrate status", the
store and "wmoutbox migrate up" agree with your tool.

Without --out the files go to standard output, each after a line naming
it. With --out they are written into DIR, made if missing; a file there of
the same name and other content is an error, never overwritten.`,
			setup: func(fs *flag.FlagSet) action {
				format := fs.String("format", formatPlain, "`format`: plain, goose or golang-migrate")
				out := fs.String("out", "", "write the files into `DIR` instead of standard output")
				return func(ctx context.Context, c *cli, args []string) error {
					return migrateSQL(ctx, c, args, *format, *out)
				}
			},
		},
	},
}

// noArgs fails when a command that takes no arguments was given some.
func noArgs(args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

// migrationJSON is a migration in JSON output.
type migrationJSON struct {
	Version   int        `json:"version"`
	Name      string     `json:"name"`
	Applied   *bool      `json:"applied,omitempty"`
	AppliedAt *time.Time `json:"applied_at,omitempty"`
}

func migrateUp(ctx context.Context, c *cli, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	d, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer d.close()
	before, err := d.applied(ctx)
	if err != nil {
		return err
	}
	if err := d.migrate(ctx); err != nil {
		return err
	}
	after, err := d.applied(ctx)
	if err != nil {
		return err
	}
	had := make(map[int]bool, len(before))
	for _, m := range before {
		had[m.Version] = true
	}
	applied := []migrationJSON{}
	version := 0
	for _, m := range after {
		version = m.Version
		if !had[m.Version] {
			applied = append(applied, migrationJSON{Version: m.Version, Name: m.Name})
		}
	}
	if c.globals.json {
		return c.writeJSON(struct {
			Dialect string          `json:"dialect"`
			Table   string          `json:"table"`
			Applied []migrationJSON `json:"applied"`
			Version int             `json:"version"`
		}{d.dialect, d.table(), applied, version})
	}
	if len(applied) == 0 {
		c.printf("%s is up to date, at migration %d.\n", d.table(), version)
		return nil
	}
	c.printf("Applied %d migration%s to %s (%s), now at migration %d:\n\n", len(applied), plural(len(applied)), d.table(), d.dialect, version)
	rows := make([][]string, 0, len(applied))
	for _, m := range applied {
		rows = append(rows, []string{strconv.Itoa(m.Version), m.Name})
	}
	return c.writeTable([]string{"VERSION", "NAME"}, rows)
}

func migrateStatus(ctx context.Context, c *cli, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	d, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer d.close()
	migrations, err := d.migrations()
	if err != nil {
		return err
	}
	applied, err := d.applied(ctx)
	if err != nil {
		return err
	}
	recorded := make(map[int]migrationfiles.Applied, len(applied))
	for _, a := range applied {
		recorded[a.Version] = a
	}
	var list []migrationJSON
	for _, m := range migrations {
		entry := migrationJSON{Version: m.Version, Name: m.Name, Applied: new(false)}
		if a, ok := recorded[m.Version]; ok {
			entry.Applied, entry.AppliedAt = new(true), new(a.AppliedAt)
			delete(recorded, m.Version)
		}
		list = append(list, entry)
	}
	// Records this wmoutbox has no file for: a later one's migrations.
	for _, a := range applied {
		if _, ok := recorded[a.Version]; ok {
			list = append(list, migrationJSON{Version: a.Version, Name: a.Name, Applied: new(true), AppliedAt: new(a.AppliedAt)})
		}
	}
	version := 0
	if len(applied) > 0 {
		version = applied[len(applied)-1].Version
	}
	latest := migrations[len(migrations)-1].Version
	if c.globals.json {
		return c.writeJSON(struct {
			Dialect    string          `json:"dialect"`
			Table      string          `json:"table"`
			Version    int             `json:"version"`
			Latest     int             `json:"latest"`
			Migrations []migrationJSON `json:"migrations"`
		}{d.dialect, d.table(), version, latest, list})
	}
	rows := make([][]string, 0, len(list))
	for _, m := range list {
		status, at := "pending", ""
		if *m.Applied {
			status, at = "applied", m.AppliedAt.Format(time.RFC3339)
		}
		if m.Version > latest {
			status = "applied, unknown to this wmoutbox"
		}
		rows = append(rows, []string{strconv.Itoa(m.Version), m.Name, status, at})
	}
	c.printf("%s (%s) is at migration %d of %d.\n\n", d.table(), d.dialect, version, latest)
	return c.writeTable([]string{"VERSION", "NAME", "STATUS", "APPLIED AT"}, rows)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// The formats of migrate sql.
const (
	formatPlain         = "plain"
	formatGoose         = "goose"
	formatGolangMigrate = "golang-migrate"
)

// file is a file migrate sql writes.
type file struct {
	Name string `json:"name"`
	Path string `json:"path,omitempty"`
	SQL  string `json:"sql,omitempty"`
}

func migrateSQL(_ context.Context, c *cli, args []string, format, out string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	d, _, err := c.configure()
	if err != nil {
		return err
	}
	scripts, err := d.scripts()
	if err != nil {
		return err
	}
	about := fmt.Sprintf("the %s table %s", d.dialect, d.qualifiedTable())
	var rendered []migrationfiles.File
	switch format {
	case formatPlain:
		rendered = []migrationfiles.File{migrationfiles.PlainFile("wmoutbox_"+d.table()+".sql", about, scripts, d.dialect != dialectMySQL)}
	case formatGoose:
		rendered = migrationfiles.GooseFiles(about, scripts)
	case formatGolangMigrate:
		rendered = migrationfiles.GolangMigrateFiles(about, scripts)
	default:
		return usagef("--format: unknown format %q (want plain, goose or golang-migrate)", format)
	}
	files := make([]file, 0, len(rendered))
	for _, f := range rendered {
		files = append(files, file{Name: f.Name, SQL: f.SQL})
	}
	if out == "" {
		if c.globals.json {
			return c.writeJSON(struct {
				Files []file `json:"files"`
			}{files})
		}
		for i, f := range files {
			if len(files) > 1 {
				if i > 0 {
					c.printf("\n")
				}
				c.printf("-- ==> %s <==\n", f.Name)
			}
			c.printf("%s", f.SQL)
		}
		return nil
	}
	written, err := writeFiles(out, files)
	if err != nil {
		return err
	}
	if c.globals.json {
		return c.writeJSON(struct {
			Files []file `json:"files"`
		}{written})
	}
	for _, f := range written {
		c.printf("%s\n", f.Path)
	}
	return nil
}

// writeFiles writes files into dir, made if missing, and returns their
// paths. A file of the same name with other content is left alone and
// fails the command; one with the same content is left as it is.
func writeFiles(dir string, files []file) ([]file, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	written := make([]file, 0, len(files))
	for _, f := range files {
		path := filepath.Join(dir, f.Name)
		existing, err := os.ReadFile(path)
		switch {
		case err == nil && bytes.Equal(existing, []byte(f.SQL)):
		case err == nil:
			return nil, fmt.Errorf("%s exists with other content: remove it to write it again", path)
		case errors.Is(err, fs.ErrNotExist):
			if err := os.WriteFile(path, []byte(f.SQL), 0o644); err != nil {
				return nil, err
			}
		default:
			return nil, err
		}
		written = append(written, file{Name: f.Name, Path: path})
	}
	return written, nil
}
