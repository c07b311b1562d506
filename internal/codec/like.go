package codec

import "strings"

// LikeEscape is the escape character of [Contains] patterns: the dialects'
// LIKE takes it in an ESCAPE clause. Not the backslash, whose meaning in a
// string literal depends on MySQL's sql_mode.
const LikeEscape = "!"

var likeEscaper = strings.NewReplacer("!", "!!", "%", "!%", "_", "!_")

// Contains returns the LIKE pattern, with [LikeEscape] as its escape
// character, that matches text containing s: s's own %, _ and ! match
// themselves.
func Contains(s string) string {
	return "%" + likeEscaper.Replace(s) + "%"
}
