package codec

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// FuzzPlainObject checks the fast decoder against encoding/json: whatever
// it accepts, encoding/json decodes to the same headers.
func FuzzPlainObject(f *testing.F) {
	for _, seed := range []string{
		`{}`, ` { } `, `{"a":"b"}`, `{"a": "b", "c": "d"}`, `{"a":"b","a":"c"}`, `{"a":"b",}`,
		`{"a":"b"} x`, `{"a":1}`, `{"a":"\u00e9"}`, `{"a":"b`, `{"a" "b"}`, `{"":""}`, "{\"a\":\"\t\"}",
		`{"a":"b"}}`, `{,}`, `{"a":"b" , "c" : "d" }`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data string) {
		if len(data) == 0 || data[0] != '{' || !utf8.ValidString(data) {
			return // DecodeHeaders rejects these before either decoder runs
		}
		fast, ok := decodePlainObject(data)
		if !ok {
			return
		}
		slow, err := decodeObject([]byte(data))
		require.NoError(t, err, "the fast decoder accepted %q", data)
		require.Equal(t, slow, fast, "decoding %q", data)
	})
}

// FuzzEncodePlainObject checks the fast encoder against encoding/json:
// whatever it encodes, it encodes to the same bytes.
func FuzzEncodePlainObject(f *testing.F) {
	for _, seed := range [][4]string{
		{"a", "b", "c", "d"}, {"b", "", "a", "x"}, {"", "", "k", "v"}, {"a", "<", "b", "c"}, {"é", "x", "y", "z"},
		{"a", "\"", "b", "\\"}, {"a", "\t", "b", "~"}, {"a", "\u2028", "b", "&"}, {"z", "1", "a", "2"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		headers := map[string]string{k1: v1, k2: v2}
		fast, ok := encodePlainObject(headers)
		if !ok {
			return
		}
		slow, err := json.Marshal(headers)
		require.NoError(t, err)
		require.Equal(t, string(slow), string(fast), "encoding %q", headers)
	})
}

func BenchmarkEncodeHeaders(b *testing.B) {
	headers := map[string]string{"bench_seq": "12345", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"outbox_event_type": "OrderCreated", "outbox_aggregate_id": "9f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60",
		"outbox_message_uuid": "6f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60", "outbox_aggregate_type": "Order"}
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeHeaders(headers); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(headers); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkDecodeHeaders(b *testing.B) {
	stored := `{"bench_seq": "12345", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ` +
		`"outbox_event_type": "OrderCreated", "outbox_aggregate_id": "9f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60", ` +
		`"outbox_message_uuid": "6f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60", "outbox_aggregate_type": "Order"}`
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeHeaders(stored); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeObject([]byte(stored)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
