// Package migrationfiles loads a dialect's embedded migration files and
// renders them for a configured table name.
package migrationfiles

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// Migration is one schema change, rendered for a configured table.
type Migration struct {
	// Version numbers migrations from 1, in the order they apply.
	Version int
	// Name is the file name, such as "0001_create_outbox_event.sql".
	Name string
	// SQL is the file's text with the configured names.
	SQL string
}

// DefaultTable is the table name the migration files are written with, so
// that any migration tool can run them as they are.
const DefaultTable = "outbox_event"

// InboxSuffix names the inbox table after the outbox table: the files
// create DefaultTable+InboxSuffix, and every dialect renders it so.
const InboxSuffix = "_inbox"

// LeaseSuffix names the lease table after the outbox table, as InboxSuffix
// does the inbox: the files create DefaultTable+LeaseSuffix.
const LeaseSuffix = "_lease"

// token matches the table name and the index names derived from it.
var token = regexp.MustCompile(`\b` + DefaultTable + `(_[a-z0-9_]+)?\b`)

// Load reads the files dir/NNNN_*.sql of fsys in order, checks that they
// are numbered 1, 2, 3..., and replaces the default table name with
// rename("") and each derived index name (outbox_event_due_idx) with
// rename(suffix) (rename("_due_idx")).
func Load(fsys fs.FS, dir string, rename func(suffix string) string) ([]Migration, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	out := make([]Migration, 0, len(names))
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
		sql := token.ReplaceAllStringFunc(string(text), func(tok string) string {
			return rename(strings.TrimPrefix(tok, DefaultTable))
		})
		out = append(out, Migration{Version: version, Name: base, SQL: sql})
	}
	return out, nil
}
