package admin

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestViewPayload(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		json, bytes []byte
		limit       int
		hide        bool
		want        payloadView
	}{
		"JSON, indented":     {json: []byte(`{"a":[1,2]}`), limit: 100, want: payloadView{Kind: "JSON", Size: 11, Shown: 11, Text: "{\n  \"a\": [\n    1,\n    2\n  ]\n}"}},
		"JSON, cut as text":  {json: []byte(`{"a":"héllo"}`), limit: 8, want: payloadView{Kind: "JSON", Size: 14, Shown: 7, Text: `{"a":"h`}},
		"bytes, hex dump":    {bytes: []byte("ab"), limit: 100, want: payloadView{Kind: "bytes", Size: 2, Shown: 2, Text: "00000000  61 62                                             |ab|\n"}},
		"bytes, cut":         {bytes: []byte("abcdef"), limit: 2, want: payloadView{Kind: "bytes", Size: 6, Shown: 2, Text: "00000000  61 62                                             |ab|\n"}},
		"empty bytes":        {bytes: []byte{}, limit: 100, want: payloadView{Kind: "bytes"}},
		"hidden":             {json: []byte(`{"secret":1}`), limit: 100, hide: true, want: payloadView{Kind: "JSON", Size: 12}},
		"JSON, cut, invalid": {json: []byte("\"\xff\xfe\xfd\xfc\xfb\""), limit: 4, want: payloadView{Kind: "JSON", Size: 7, Shown: 4, Text: "00000000  22 ff fe fd                                       |\"...|\n"}},
	} {
		got := viewPayload(tc.json, tc.bytes, tc.limit, tc.hide)
		require.Equal(t, tc.want, got, name)
	}
}

func TestBase(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{
		"/":                   "./",
		"/dead":               "./",
		"/dead/replay":        "../",
		"/events/01A":         "../",
		"/events/a%2Fb":       "../",
		"/static/admin.css":   "../",
		"/a/b/c":              "../../",
		"/dead?after=x%2F..y": "./",
	} {
		require.Equal(t, want, base(httptest.NewRequest("GET", path, nil)), path)
	}
}

func TestFmtNum(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1_000_000: "1,000,000", -12345: "-12,345"} {
		require.Equal(t, want, fmtNum(n))
	}
	require.Equal(t, "abc…", shorten(3, "abcdef"))
	require.Equal(t, "äöü", shorten(3, "äöü"))
	require.Empty(t, resultMessage(map[string][]string{"did": {"replay"}, "n": {"1 or <b>"}}))
	require.True(t, strings.HasPrefix(resultMessage(map[string][]string{"did": {"purge"}, "n": {"3"}}), "Purged 3 events"))
}
