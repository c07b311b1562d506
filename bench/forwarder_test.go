package main

import (
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// These tests measure, so they do not run in parallel.

func TestForwarderDrain(t *testing.T) {
	pool := testPool(t)
	const n = 2000
	for _, s := range []forwarderSetting{forwarderDefault, forwarderTuned} {
		t.Run(s.name, func(t *testing.T) {
			w, err := forwarderDrain(t.Context(), pool, n, s)
			require.NoError(t, err)
			require.Equal(t, n, w.events)
			require.Positive(t, w.elapsed)
			t.Logf("%s: drained %d events in %s: %.0f events/s", s.name, n, w.elapsed, w.rate())
			fwdRequireNoTables(t, pool)
		})
	}
}

func TestForwarderLatency(t *testing.T) {
	pool := testPool(t)
	const (
		rate  = 500
		count = 200
	)
	sample, err := forwarderLatency(t.Context(), pool, rate, count, forwarderTuned)
	require.NoError(t, err)
	lat := sample.latencies
	require.Len(t, lat, count)
	slices.Sort(lat)
	t.Logf("tuned, %d events at %d/s: p50 %s, p99 %s, max %s", count, rate,
		percentile(lat, 50), percentile(lat, 99), lat[len(lat)-1])
	fwdRequireNoTables(t, pool)
}

// fwdRequireNoTables checks that a run dropped the tables it created.
func fwdRequireNoTables(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var left int
	err := pool.QueryRow(t.Context(),
		`SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 'watermill%'`).Scan(&left)
	require.NoError(t, err)
	require.Zero(t, left, "watermill tables left behind")
}
