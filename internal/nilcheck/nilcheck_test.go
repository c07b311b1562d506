package nilcheck

import (
	"database/sql"
	"testing"
)

func TestIs(t *testing.T) {
	var tx *sql.Tx
	var fn func()
	var m map[string]int
	var s []int
	var ch chan int
	var stringer interface{ String() string }
	for name, v := range map[string]any{"nil": nil, "nil pointer": tx, "nil func": fn, "nil map": m,
		"nil slice": s, "nil channel": ch, "nil interface": stringer} {
		if !Is(v) {
			t.Errorf("%s: Is = false, want true", name)
		}
	}
	for name, v := range map[string]any{"pointer": &sql.Tx{}, "zero int": 0, "empty string": "",
		"empty slice": []int{}, "struct": struct{}{}} {
		if Is(v) {
			t.Errorf("%s: Is = true, want false", name)
		}
	}
}

func TestSame(t *testing.T) {
	tx, other := &sql.Tx{}, &sql.Tx{}
	tests := []struct {
		name string
		a, b any
		want bool
	}{
		{"same pointer", tx, tx, true},
		{"other pointer", tx, other, false},
		{"equal values", "tx", "tx", true},
		{"other types", tx, "tx", false},
		{"both nil", nil, nil, true},
		{"incomparable", []int{1}, []int{1}, false},
		{"incomparable in a struct", struct{ s []int }{}, struct{ s []int }{}, false},
	}
	for _, tt := range tests {
		if got := Same(tt.a, tt.b); got != tt.want {
			t.Errorf("%s: Same = %v, want %v", tt.name, got, tt.want)
		}
	}
}
