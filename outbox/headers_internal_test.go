package outbox

import (
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

func BenchmarkDecodeHeaders(b *testing.B) {
	stored := []byte(`{"bench_seq": "12345", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ` +
		`"outbox_event_type": "OrderCreated", "outbox_aggregate_id": "9f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60", ` +
		`"outbox_message_uuid": "6f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60", "outbox_aggregate_type": "Order"}`)
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
			if _, err := decodeObject(stored); err != nil {
				b.Fatal(err)
			}
		}
	})
}
