package postgres

import (
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

func TestArrayParametersEncodeWithoutAnAllocationPerElement(t *testing.T) {
	tests := []struct {
		name  string
		oid   uint32
		array func(n int) any
	}{
		// Elements not of the zero value: Go boxes a zero value without an
		// allocation.
		{"text", pgtype.VarcharArrayOID, func(n int) any { return slices.Repeat(array[text]{"01KAWZ8RS6YB1T6QH0R4F6Q2ZS"}, n) }},
		{"bytea", pgtype.ByteaArrayOID, func(n int) any { return slices.Repeat(array[bytea]{[]byte(`{"orderId":"9f1c2e4a"}`)}, n) }},
		{"timestamptz", pgtype.TimestamptzArrayOID, func(n int) any { return slices.Repeat(array[timestamptz]{timestamptz(time.Now())}, n) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := pgtype.NewMap()
			allocs := func(n int) float64 {
				value, buf := tt.array(n), make([]byte, 0, 64<<10)
				return testing.AllocsPerRun(20, func() {
					if _, err := m.Encode(tt.oid, pgtype.BinaryFormatCode, value, buf); err != nil {
						t.Fatal(err)
					}
				})
			}
			require.Equal(t, allocs(10), allocs(1000), "allocations for 10 elements, then for 1000")
		})
	}
}
