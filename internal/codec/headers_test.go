package codec_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/codec"
)

func TestHeadersRoundTrip(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		headers map[string]string
	}{
		{"nil", nil},
		{"empty", map[string]string{}},
		{"one", map[string]string{"trace-id": "abc"}},
		{"empty value", map[string]string{"k": ""}},
		{"quotes and backslashes", map[string]string{`"key"`: `va"l\ue\`, `\`: `"`}},
		{"html characters", map[string]string{"<script>": "a && b > c", "&amp;": "<>&"}},
		{"control characters", map[string]string{"tab\t": "line\nbreak\r\x01\x1f\x7f"}},
		{"unicode", map[string]string{"ключ": "значение", "日本": "語", "emoji": "🙂", "bom": "\ufeff"}},
		{"line separators", map[string]string{"ls": "\u2028\u2029"}},
		{"replacement character", map[string]string{"r": "\uFFFD"}},
		{"many", map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			encoded, err := codec.EncodeHeaders(tt.headers)
			require.NoError(t, err)
			if len(tt.headers) == 0 {
				require.Empty(t, encoded, "empty headers are stored as NULL")
			} else {
				require.True(t, json.Valid([]byte(encoded)), "%s", encoded)
				require.Equal(t, byte('{'), encoded[0])
			}

			decoded, err := codec.DecodeHeaders(encoded)
			require.NoError(t, err)
			if len(tt.headers) == 0 {
				require.Nil(t, decoded)
				return
			}
			require.Equal(t, tt.headers, decoded)
		})
	}
}

func TestDecodeHeaders(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		data    string
		want    map[string]string
		wantErr bool
	}{
		{name: "nil", data: ""},
		{name: "null", data: "null"},
		{name: "null with spaces", data: " \n null\t"},
		{name: "spaces", data: "  "},
		{name: "empty object", data: "{}"},
		{name: "object", data: `{"a":"1","b":"2"}`, want: map[string]string{"a": "1", "b": "2"}},
		{name: "surrounding spaces", data: ` {"a":"1"} `, want: map[string]string{"a": "1"}},
		{name: "escapes", data: `{"\u003c":"\u00e9\n"}`, want: map[string]string{"<": "é\n"}},
		{name: "duplicate key, last wins", data: `{"a":"1","a":"2"}`, want: map[string]string{"a": "2"}},

		{name: "array", data: `[]`, wantErr: true},
		{name: "array of objects", data: `[{"a":"b"}]`, wantErr: true},
		{name: "string", data: `"x"`, wantErr: true},
		{name: "number", data: `1`, wantErr: true},
		{name: "true", data: `true`, wantErr: true},
		{name: "number value", data: `{"a":1}`, wantErr: true},
		{name: "object value", data: `{"a":{"b":"c"}}`, wantErr: true},
		{name: "array value", data: `{"a":["b"]}`, wantErr: true},
		{name: "empty key", data: `{"":"x"}`, wantErr: true},
		{name: "NUL in key", data: `{"a\u0000":"x"}`, wantErr: true},
		{name: "NUL in value", data: `{"a":"x\u0000"}`, wantErr: true},
		{name: "garbage", data: `garbage`, wantErr: true},
		{name: "truncated", data: `{"a":"b"`, wantErr: true},
		{name: "trailing data", data: `{"a":"b"} {}`, wantErr: true},
		{name: "trailing comma", data: `{"a":"b",}`, wantErr: true},
		{name: "binary", data: "\x00\xff\xfe", wantErr: true},
		{name: "null value", data: `{"trace":null}`, wantErr: true},
		{name: "invalid UTF-8 in value", data: "{\"a\":\"\xff\"}", wantErr: true},
		{name: "invalid UTF-8 in key", data: "{\"\xc3\":\"b\"}", wantErr: true},
		{name: "vertical tab before the object, not JSON whitespace", data: "\v{}", wantErr: true},
		{name: "form feed after the object", data: "{}\f", wantErr: true},
		{name: "no-break space alone", data: "\u00a0", wantErr: true},
		{name: "next line before null", data: "\u0085null", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, err := codec.DecodeHeaders(tt.data)
			if tt.wantErr {
				require.Error(t, err)
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// headerAccepted reports whether a writer accepts headers h.
func headerAccepted(h map[string]string) bool { return codec.ValidateHeaders(h, 1<<20) == "" }

func FuzzHeaders(f *testing.F) {
	seeds := []struct {
		data       string
		key, value string
	}{
		{`{"a":"b"}`, "a", "b"},
		{`null`, "trace-id", ""},
		{`{}`, "<>&", `"quoted"`},
		{`{"\u003c":"\u00e9"}`, "ключ", "значение"},
		{`[]`, "", "x"},
		{`{"a":1}`, "a\x00", "b"},
		{`{"":"x"}`, "\xff", "\xfe"},
		{` {"k":"v","k":"w"} `, "\u2028", "\\"},
		{"\v{}\u00a0", "k", "v"},
	}
	for _, s := range seeds {
		f.Add([]byte(s.data), s.key, s.value)
	}

	f.Fuzz(func(t *testing.T, data []byte, key, value string) {
		// Property 1: whatever decodes, re-encodes to the same headers, and
		// is JSON (or JSON's whitespace alone, which reads as NULL).
		if decoded, err := codec.DecodeHeaders(string(data)); err == nil {
			if len(bytes.Trim(data, " \t\n\r")) > 0 {
				require.True(t, json.Valid(data), "decoded %q, which is not JSON", data)
			}
			require.True(t, headerAccepted(decoded), "decoded headers %q would not pass validation", decoded)
			encoded, err := codec.EncodeHeaders(decoded)
			require.NoError(t, err)
			again, err := codec.DecodeHeaders(encoded)
			require.NoError(t, err)
			require.Equal(t, decoded, again)
		}

		// Property 2: headers that pass validation survive storage.
		headers := map[string]string{key: value, "fixed": "value"}
		if !headerAccepted(headers) {
			return
		}
		encoded, err := codec.EncodeHeaders(headers)
		require.NoError(t, err)
		decoded, err := codec.DecodeHeaders(encoded)
		require.NoError(t, err)
		require.Equal(t, headers, decoded)
	})
}
