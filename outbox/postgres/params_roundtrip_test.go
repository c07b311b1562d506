package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// The store's batch statements pass their columns as these arrays: in
// binary when pgx knows the parameters' types, and otherwise in the text
// the arrays write themselves, with quoting and NULLs to get right.
func TestArrayParametersRoundTrip(t *testing.T) {
	for _, mode := range queryModes {
		t.Run(mode.String(), func(t *testing.T) { roundTripArrays(t, testdb.NewInMode(t, mode)) })
	}
}

func roundTripArrays(t *testing.T, pool *pgxpool.Pool) {
	at := time.Date(2026, 11, 25, 13, 36, 30, 123456000, time.UTC)
	var (
		texts      []string
		byteas     [][]byte
		times      []time.Time
		nilIsNull  bool
		emptyCount int
	)
	err := pool.QueryRow(t.Context(), `SELECT $1::varchar[], $2::bytea[], $3::timestamptz[], $4::text[] IS NULL, cardinality($5::text[])`,
		postgres.TextArray{"a", "", "é,{x}\"", `back\slash`, "NULL", " spaced "}, postgres.ByteaArray{[]byte("p"), nil}, postgres.TimestamptzArray{postgres.Timestamptz(at)},
		postgres.TextArray(nil), postgres.TextArray{},
	).Scan(&texts, &byteas, &times, &nilIsNull, &emptyCount)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "", "é,{x}\"", `back\slash`, "NULL", " spaced "}, texts)
	require.Equal(t, [][]byte{[]byte("p"), nil}, byteas, "a nil []byte element is NULL")
	require.Len(t, times, 1)
	require.True(t, at.Equal(times[0]), "got %v", times[0])
	require.True(t, nilIsNull, "a nil array is NULL")
	require.Zero(t, emptyCount)
}
