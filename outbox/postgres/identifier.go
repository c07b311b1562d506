package postgres

import (
	"fmt"
	"regexp"
)

var identifierPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Identifier limits. PostgreSQL cuts names at 63 bytes; the table name is
// shorter so that the index names derived from it (table + "_finished_idx")
// fit too.
const (
	maxSchemaLen = 63
	maxTableLen  = 48
)

// ValidateIdentifier reports whether name may be used as a schema or table
// name: 1 to max characters of lowercase ASCII letters, digits and
// underscores, not starting with a digit. Names are quoted in SQL as well;
// this rule keeps them free of surprises (case folding, quoting, injection).
func ValidateIdentifier(name string, max int) error {
	if len(name) == 0 || len(name) > max {
		return fmt.Errorf("%w: %q must be 1 to %d characters", ErrInvalidIdentifier, name, max)
	}
	if !identifierPattern.MatchString(name) {
		return fmt.Errorf("%w: %q may hold only a-z, 0-9 and _, and not start with a digit", ErrInvalidIdentifier, name)
	}
	return nil
}
