package migrationfiles

import (
	"fmt"
	"strings"
)

// File is a file of migrations for a tool: its name and its text.
type File struct {
	Name string
	SQL  string
}

// PlainFile is every up script in one file named name, in one
// transaction (BEGIN; … COMMIT;) when transactional, as Migrate applies
// them. about names the table, as in "the postgres table s.outbox_event".
func PlainFile(name, about string, scripts []Script, transactional bool) File {
	var b strings.Builder
	last := 0
	if len(scripts) > 0 {
		last = scripts[len(scripts)-1].Version
	}
	fmt.Fprintf(&b, "-- wmoutbox migrations 1 to %d for %s, as Migrate applies them.\n"+
		"-- Written by `wmoutbox migrate sql`; each records itself in wmoutbox_migration.\n", last, about)
	if transactional {
		b.WriteString("\nBEGIN;\n")
	}
	for _, s := range scripts {
		fmt.Fprintf(&b, "\n-- Migration %d: %s\n\n%s", s.Version, s.Name, s.Up)
	}
	if transactional {
		b.WriteString("\nCOMMIT;\n")
	}
	return File{Name: name, SQL: b.String()}
}

// GooseFiles are the scripts in goose's format, a file for each named as
// the migration: its statements under -- +goose Up and -- +goose Down,
// those with a semicolon inside (a function body, a DO block) between
// StatementBegin and StatementEnd, since goose otherwise ends a statement
// at every line that ends with a semicolon.
func GooseFiles(about string, scripts []Script) []File {
	files := make([]File, 0, len(scripts))
	for _, s := range scripts {
		var b strings.Builder
		b.WriteString(header(s, "up and down", about))
		section := func(annotation, script string) {
			b.WriteString("-- +goose " + annotation + "\n")
			for _, st := range Split(script) {
				if st.Nested {
					b.WriteString("-- +goose StatementBegin\n" + st.Text + "\n-- +goose StatementEnd\n\n")
					continue
				}
				b.WriteString(st.Text + "\n\n")
			}
		}
		section("Up", s.Up)
		section("Down", s.Down)
		files = append(files, File{Name: s.Name, SQL: strings.TrimSuffix(b.String(), "\n")})
	}
	return files
}

// GolangMigrateFiles are the scripts in golang-migrate's format: for each
// migration NNNN_name.up.sql and NNNN_name.down.sql.
func GolangMigrateFiles(about string, scripts []Script) []File {
	files := make([]File, 0, 2*len(scripts))
	for _, s := range scripts {
		base := strings.TrimSuffix(s.Name, ".sql")
		files = append(files,
			File{Name: base + ".up.sql", SQL: header(s, "up", about) + s.Up},
			File{Name: base + ".down.sql", SQL: header(s, "down", about) + s.Down})
	}
	return files
}

// header is the comment that opens a file of migration s. It must not
// hold "+goose", which goose would read as an annotation.
func header(s Script, direction, about string) string {
	return fmt.Sprintf("-- wmoutbox migration %d (%s), %s, for %s.\n"+
		"-- Written by `wmoutbox migrate sql`; it records itself in wmoutbox_migration.\n\n",
		s.Version, s.Name, direction, about)
}
