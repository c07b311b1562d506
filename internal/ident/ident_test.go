package ident

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var errInvalid = errors.New("invalid identifier")

// plain is the rule Validate documents, written out independently of its
// implementation.
var plain = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

func TestValidate(t *testing.T) {
	t.Parallel()

	const maxLen = 48
	tests := []struct {
		name  string
		ident string
		ok    bool
	}{
		{"default table", "outbox_event", true},
		{"one letter", "t", true},
		{"underscore only", "_", true},
		{"leading underscore", "_outbox", true},
		{"digits after the first", "outbox2_v10", true},
		{"at the limit", strings.Repeat("t", maxLen), true},
		{"over the limit", strings.Repeat("t", maxLen+1), false},
		{"empty", "", false},
		{"uppercase", "Outbox", false},
		{"leading digit", "1outbox", false},
		{"double quote", `out"box`, false},
		{"single quote", "out'box", false},
		{"injection", "a;DROP TABLE x", false},
		{"space", "outbox event", false},
		{"trailing newline", "outbox\n", false},
		{"hyphen", "outbox-event", false},
		{"dot", "main.outbox", false},
		{"square bracket", "[outbox]", false},
		{"backtick", "`outbox`", false},
		{"unicode lookalike", "outbox_evеnt", false}, // Cyrillic е
		{"NUL", "outbox\x00", false},
		{"invalid UTF-8", "outbox\xff", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			err := Validate(tt.ident, maxLen, errInvalid)
			if tt.ok {
				require.NoError(t, err)
				require.Equal(t, `"`+tt.ident+`"`, Quote(tt.ident))
				return
			}
			require.ErrorIs(t, err, errInvalid)
		})
	}
}

func FuzzValidate(f *testing.F) {
	for _, s := range []string{"outbox_event", "_", "t9", "Outbox", "9t", `a"b`, "a;DROP TABLE x", "é", "a\x00", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := Validate(name, 48, errInvalid)
		ok := plain.MatchString(name) && len(name) <= 48
		if err != nil {
			require.ErrorIs(t, err, errInvalid)
			require.False(t, ok, "a plain identifier was rejected: %q", name)
			return
		}
		require.True(t, ok, "accepted %q", name)
		require.NotContains(t, name, `"`, "quoting an accepted name needs no escape")
	})
}
