package postgres

import "github.com/wmoutbox/wmoutbox/internal/ident"

// Identifier limits. PostgreSQL cuts names at 63 bytes; the table name is
// shorter so that the index names derived from it (table + "_finished_idx")
// fit too.
const (
	maxSchemaLen = 63
	maxTableLen  = ident.MaxTableLen
)

// ValidateIdentifier reports whether name may be used as a schema or table
// name: 1 to maxLen characters of lowercase ASCII letters, digits and
// underscores, not starting with a digit, sqlite_ or pg_ (prefixes the
// databases keep for themselves). Names are quoted in SQL as well;
// this rule keeps them free of surprises (case folding, quoting, injection).
// Every dialect of the outbox applies the same rule.
func ValidateIdentifier(name string, maxLen int) error {
	return ident.Validate(name, maxLen, ErrInvalidIdentifier)
}
