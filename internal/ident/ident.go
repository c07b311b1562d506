// Package ident holds the rule that every dialect applies to the table and
// schema names it is configured with, so that a name valid for one store is
// valid for all of them.
package ident

import (
	"fmt"
	"regexp"
	"strings"
)

var pattern = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// reserved are the prefixes a dialect keeps for itself: SQLite refuses to
// create tables and indexes named so, PostgreSQL schemas.
var reserved = []string{"sqlite_", "pg_"}

// Validate reports whether name is a plain identifier: 1 to maxLen characters
// of lowercase ASCII letters, digits and underscores, not starting with a
// digit or a reserved prefix (sqlite_, pg_). Such a name means the same
// quoted or not, in every dialect: no case folding, no quoting, no
// injection. The error wraps invalid, the calling dialect's sentinel.
func Validate(name string, maxLen int, invalid error) error {
	return ValidateNamed("", name, maxLen, invalid)
}

// ValidateNamed is [Validate], the error naming what the name is for
// ("table", "schema"): "postgres: invalid identifier: table "Orders" may
// hold only...".
func ValidateNamed(what, name string, maxLen int, invalid error) error {
	quoted := fmt.Sprintf("%q", name)
	if what != "" {
		quoted = what + " " + quoted
	}
	if len(name) == 0 || len(name) > maxLen {
		return fmt.Errorf("%w: %s must be 1 to %d characters", invalid, quoted, maxLen)
	}
	if !pattern.MatchString(name) {
		return fmt.Errorf("%w: %s may hold only a-z, 0-9 and _, and not start with a digit", invalid, quoted)
	}
	for _, prefix := range reserved {
		if strings.HasPrefix(name, prefix) {
			return fmt.Errorf("%w: %s starts with %s, which a database keeps for itself", invalid, quoted, prefix)
		}
	}
	return nil
}

// MigrationTable is where every dialect's Migrate records the migrations
// it applied, beside the outbox table.
const MigrationTable = "wmoutbox_migration"

// MaxTableLen is the longest outbox table name: PostgreSQL's 63-byte
// identifiers less the index suffixes, the limit of every dialect, so that
// a name valid for one store is valid for all.
const MaxTableLen = 48

// ValidateTable is [Validate] for an outbox table's name, at most
// [MaxTableLen] characters and not [MigrationTable].
func ValidateTable(name string, invalid error) error {
	if err := ValidateNamed("table", name, MaxTableLen, invalid); err != nil {
		return err
	}
	if name == MigrationTable {
		return fmt.Errorf("%w: table %q is the name of the migration table", invalid, name)
	}
	return nil
}

// Quote returns a validated name in double quotes, the standard SQL form
// that PostgreSQL and SQLite share.
func Quote(name string) string { return `"` + name + `"` }
