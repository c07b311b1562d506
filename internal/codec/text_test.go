package codec_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/codec"
)

func TestCutError(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		in   string
		want string
	}{
		{"empty", "", ""},
		{"short", "connection refused", "connection refused"},
		{"exactly at the limit", strings.Repeat("a", 4000), strings.Repeat("a", 4000)},
		{"one over the limit", strings.Repeat("a", 4001), strings.Repeat("a", 4000)},
		{"5000 ASCII characters", strings.Repeat("x", 5000), strings.Repeat("x", 4000)},
		{"two-byte characters at the limit", strings.Repeat("é", 4000), strings.Repeat("é", 4000)},
		{"5000 two-byte characters", strings.Repeat("é", 5000), strings.Repeat("é", 4000)},
		{"5000 four-byte characters", strings.Repeat("🙂", 5000), strings.Repeat("🙂", 4000)},
		{"multi-byte rune at the boundary", strings.Repeat("a", 3999) + "日本語", strings.Repeat("a", 3999) + "日"},
		{"invalid UTF-8 replaced", "bad \xff byte", "bad \uFFFD byte"},
		{"run of invalid bytes", "a\xff\xfe\xfdb", "a\uFFFDb"},
		{"truncated rune", "caf\xc3", "caf\uFFFD"},
		{"NUL removed", "a\x00b\x00", "ab"},
		{"only NUL", "\x00\x00", ""},
		{"NUL does not count toward the limit", strings.Repeat("a\x00", 4000), strings.Repeat("a", 4000)},
		{"invalid UTF-8 then cut", strings.Repeat("\xff", 1) + strings.Repeat("b", 4500), "\uFFFD" + strings.Repeat("b", 3999)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got := codec.CutError(tt.in)
			require.Equal(t, tt.want, got)
			require.True(t, utf8.ValidString(got))
			require.NotContains(t, got, "\x00")
			require.LessOrEqual(t, utf8.RuneCountInString(got), codec.MaxErrorLen)
			require.Equal(t, got, codec.CutError(got), "cutting twice changes nothing")
		})
	}
}
