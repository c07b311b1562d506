package migrationfiles

import (
	"fmt"
	"strconv"
	"strings"
)

// Script is a migration written for another migration tool (goose,
// golang-migrate, psql): Up creates the record table when it is missing,
// applies the migration and records it, and Down undoes the migration and
// deletes its record, so that the tool, the dialect's Migrate and the
// records it reads agree on what is applied. Each statement of Up and Down
// ends with a semicolon at the end of a line.
type Script struct {
	// Version and Name are the migration's.
	Version int
	Name    string
	// Up applies the migration and records it; recording it again is a
	// no-op.
	Up string
	// Down undoes the migration and deletes its record.
	Down string
}

// Recorder is the SQL with which a dialect records migrations in a
// script, where values cannot be bind parameters.
type Recorder struct {
	// CreateTable creates the record table when it is missing.
	CreateTable string
	// Record inserts the record of a migration unless it is there;
	// Unrecord deletes it. {table_name}, {version} and {file} stand for
	// the outbox table's name and the migration's version and file name,
	// as SQL literals.
	Record, Unrecord string
}

// Scripts returns the scripts of migrations for the outbox table named
// table (unqualified). Every migration must have its Down.
func Scripts(migrations []Migration, table string, r Recorder) ([]Script, error) {
	out := make([]Script, 0, len(migrations))
	for _, m := range migrations {
		if strings.TrimSpace(m.Down) == "" {
			return nil, fmt.Errorf("migration %s has no down migration (%s/%s)", m.Name, DownDir, m.Name)
		}
		values := strings.NewReplacer("{table_name}", Literal(table), "{version}", strconv.Itoa(m.Version), "{file}", Literal(m.Name))
		out = append(out, Script{
			Version: m.Version,
			Name:    m.Name,
			Up: terminate(r.CreateTable) + "\n" + terminate(m.SQL) + "\n" +
				terminate(values.Replace(r.Record)),
			Down: terminate(m.Down) + "\n" + terminate(values.Replace(r.Unrecord)),
		})
	}
	return out, nil
}

// terminate trims sql and ends it with a semicolon and a line break.
func terminate(sql string) string {
	sql = strings.TrimSpace(sql)
	if !strings.HasSuffix(sql, ";") {
		sql += ";"
	}
	return sql + "\n"
}

// Literal quotes s as an SQL string literal. The strings it is given
// (table and file names) hold no backslash, which MySQL would read as an
// escape.
func Literal(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// Statement is one statement of a script.
type Statement struct {
	// Text is the statement with the comments before it and its closing
	// semicolon.
	Text string
	// Nested tells that a semicolon other than the closing one is in the
	// statement (in a string, a dollar-quoted body, a block comment): tools
	// that split scripts at every semicolon ending a line, as goose does,
	// must be told where such a statement ends.
	Nested bool
}

// Split splits a script into its statements, at the semicolons outside
// quotes ('…', "…", `…`), dollar quotes ($$…$$, $tag$…$tag$) and comments
// (-- to the end of the line, /* … */). Comments after the last statement
// are dropped; text after the last semicolon that is more than comments is
// a last statement, without a semicolon.
func Split(script string) []Statement {
	var (
		out     []Statement
		start   int  // where the current statement starts
		hasCode bool // the current statement holds more than comments
		nested  bool
	)
	for i := 0; i < len(script); {
		c := script[i]
		switch {
		case c == '-' && strings.HasPrefix(script[i:], "--"):
			end := strings.IndexByte(script[i:], '\n')
			if end < 0 {
				end = len(script) - i
			}
			i += end
			continue
		case c == '/' && strings.HasPrefix(script[i:], "/*"):
			end := strings.Index(script[i+2:], "*/")
			if end < 0 {
				end = len(script) - i - 4
			}
			if strings.Contains(script[i:i+2+end], ";") {
				nested = true
			}
			i += end + 4
			continue
		case c == '\'' || c == '"' || c == '`':
			hasCode = true
			end := strings.IndexByte(script[i+1:], c)
			if end < 0 {
				end = len(script) - i - 2
			}
			if strings.Contains(script[i:i+2+end], ";") {
				nested = true
			}
			i += end + 2 // a doubled quote is two quoted strings in a row
			continue
		case c == '$' && (i == 0 || !isIdent(script[i-1])):
			if tag, ok := dollarTag(script[i:]); ok {
				hasCode = true
				next := len(script) // unterminated: the rest
				if end := strings.Index(script[i+len(tag):], tag); end >= 0 {
					next = i + 2*len(tag) + end
				}
				if strings.Contains(script[i:next], ";") {
					nested = true
				}
				i = next
				continue
			}
			hasCode = true
		case c == ';':
			out = append(out, Statement{Text: strings.TrimSpace(script[start : i+1]), Nested: nested})
			start, hasCode, nested = i+1, false, false
		case c != ' ' && c != '\t' && c != '\n' && c != '\r':
			hasCode = true
		}
		i++
	}
	if rest := strings.TrimSpace(script[start:]); hasCode && rest != "" {
		out = append(out, Statement{Text: rest, Nested: nested})
	}
	return out
}

// dollarTag returns the dollar-quote tag s starts with ($$ or $tag$).
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		switch {
		case s[j] == '$':
			return s[:j+1], true
		case isIdent(s[j]) && (j > 1 || s[j] < '0' || s[j] > '9'):
		default:
			return "", false
		}
	}
	return "", false
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
