// Package migrationfiles loads a dialect's embedded migration files and
// renders them for a configured table name, and writes them out as
// scripts that other migration tools can run.
package migrationfiles

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Migration is one schema change, rendered for a configured table.
type Migration struct {
	// Version numbers migrations from 1, in the order they apply.
	Version int
	// Name is the file name, such as "0001_create_outbox_event.sql".
	Name string
	// SQL is the file's text with the configured names.
	SQL string
	// Down is the SQL that undoes SQL (from the file of the same name in
	// the down folder), with the configured names; "" when there is no
	// such file.
	Down string
}

// Applied is a migration recorded in the wmoutbox_migration table: the
// migrations applied to one outbox table.
type Applied struct {
	// Version is the migration's version.
	Version int
	// Name is its file name, as recorded.
	Name string
	// AppliedAt is when it was recorded, in UTC.
	AppliedAt time.Time
}

// DefaultTable is the table name the migration files are written with, so
// that any migration tool can run them as they are.
const DefaultTable = "outbox_event"

// InboxSuffix names the inbox table after the outbox table: the files
// create DefaultTable+InboxSuffix, and every dialect renders it so.
const InboxSuffix = "_inbox"

// DownDir is the folder, inside a dialect's migrations folder, of the
// down migrations: DownDir/NNNN_name.sql undoes NNNN_name.sql.
const DownDir = "down"

// LeaseSuffix names the lease table after the outbox table, as InboxSuffix
// does the inbox: the files create DefaultTable+LeaseSuffix.
const LeaseSuffix = "_lease"

// token matches the table name and the index names derived from it.
var token = regexp.MustCompile(`\b` + DefaultTable + `(_[a-z0-9_]+)?\b`)

// Load reads the files dir/NNNN_*.sql of fsys in order, checks that they
// are numbered 1, 2, 3..., and replaces the default table name with
// rename("") and each derived index name (outbox_event_due_idx) with
// rename(suffix) (rename("_due_idx")). Each migration's Down is the
// file of the same name in dir/down, rendered the same way, or "" when
// there is none; a down file that undoes no migration is an error.
func Load(fsys fs.FS, dir string, rename func(suffix string) string) ([]Migration, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	render := func(text []byte) string {
		return token.ReplaceAllStringFunc(string(text), func(tok string) string {
			return rename(strings.TrimPrefix(tok, DefaultTable))
		})
	}
	out := make([]Migration, 0, len(names))
	ups := make(map[string]bool, len(names))
	for i, name := range names {
		base := path.Base(name)
		version, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil || version != i+1 {
			return nil, fmt.Errorf("migration %s is out of sequence", base)
		}
		text, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", base, err)
		}
		m := Migration{Version: version, Name: base, SQL: render(text)}
		down, err := fs.ReadFile(fsys, path.Join(dir, DownDir, base))
		switch {
		case err == nil:
			m.Down = render(down)
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("read down migration %s: %w", base, err)
		}
		ups[base] = true
		out = append(out, m)
	}
	downs, err := fs.Glob(fsys, path.Join(dir, DownDir, "*.sql"))
	if err != nil {
		return nil, fmt.Errorf("list down migrations: %w", err)
	}
	for _, name := range downs {
		if base := path.Base(name); !ups[base] {
			return nil, fmt.Errorf("down migration %s undoes no migration", base)
		}
	}
	return out, nil
}
