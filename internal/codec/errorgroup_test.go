package codec_test

import (
	"strings"
	"testing"

	"github.com/wmoutbox/wmoutbox/internal/codec"
)

func TestErrorGroup(t *testing.T) {
	same := [][]string{
		{"order 42 not found", "order 1234 not found"},
		{"dial tcp 10.0.0.7:5432: connect: connection refused", "dial tcp 192.168.1.20:6543: connect: connection refused"},
		{"dial tcp [::1]:9092: i/o timeout", "dial tcp [fe80::1]:9093: i/o timeout"},
		{"post http://billing:8080/charge: EOF", "post http://billing:9090/charge: EOF"},
		{"customer 6f1c0b9e-3a3d-4f6e-9c1a-2b7d4c8e9f00 is blocked", "customer 0e9f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b is blocked"},
		{"event 01JD3X6Z8K2M4N6P8Q0R2S4T6V deduplicated", "event 01JD3X7A0B2C4D6E8F0G2H4J6K deduplicated"},
		{"checksum deadbeef00 mismatch", "checksum 0badc0ffee mismatch"},
		{"timeout after 1.5s", "timeout after 30s"},
	}
	for _, pair := range same {
		k1, r1 := codec.ErrorGroup(pair[0])
		k2, r2 := codec.ErrorGroup(pair[1])
		if k1 != k2 || r1 != r2 {
			t.Errorf("ErrorGroup(%q) = %s %q, ErrorGroup(%q) = %s %q: want one group", pair[0], k1, r1, pair[1], k2, r2)
		}
		if len(k1) != 16 {
			t.Errorf("key %q: want 16 hex characters", k1)
		}
	}
	different := [][]string{
		{"order 42 not found", "order 42 cancelled"},
		{"connection refused", "connection reset by peer"},
		{"bad payload", "Bad payload"},
	}
	for _, pair := range different {
		k1, _ := codec.ErrorGroup(pair[0])
		k2, _ := codec.ErrorGroup(pair[1])
		if k1 == k2 {
			t.Errorf("ErrorGroup(%q) and ErrorGroup(%q): one group %s, want two", pair[0], pair[1], k1)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"order 42 not found", "order <n> not found"},
		{"dial tcp 10.0.0.7:5432: connection refused", "dial tcp <addr>: connection refused"},
		{"customer 6f1c0b9e-3a3d-4f6e-9c1a-2b7d4c8e9f00", "customer <id>"},
		{"hash abc12345ef", "hash <hex>"},
		{"code beef", "code beef"},
	} {
		if _, got := codec.ErrorGroup(tc.in); got != tc.want {
			t.Errorf("reason of %q = %q, want %q", tc.in, got, tc.want)
		}
	}
	if _, r := codec.ErrorGroup(strings.Repeat("é", 500)); len([]rune(r)) != codec.MaxReasonLen {
		t.Errorf("long error: reason of %d characters, want %d", len([]rune(r)), codec.MaxReasonLen)
	}
}
