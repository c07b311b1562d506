package mysql

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStatementsOf(t *testing.T) {
	t.Parallel()
	file := `-- a header;
-- over two lines

CREATE TABLE a (x int);
-- about b; with a semicolon
CREATE TABLE b (
    y int -- a column;
);
-- a trailing comment
`
	require.Equal(t, []string{
		"-- a header;\n-- over two lines\n\nCREATE TABLE a (x int);",
		"-- about b; with a semicolon\nCREATE TABLE b (\n    y int -- a column;\n);",
	}, statementsOf(file))
	require.Equal(t, []string{"SELECT 1"}, statementsOf("SELECT 1"), "a last statement without its semicolon")
	require.Empty(t, statementsOf("-- nothing\n\n"))
}
