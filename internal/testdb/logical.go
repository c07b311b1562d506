package testdb

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/wmoutbox/wmoutbox/internal/testenv"
)

// Querier reads a row: *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy
// it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// RequireLogicalDecoding skips t unless the server db is on runs with
// wal_level = logical, which logical replication (the log relay) needs
// and PostgreSQL does not start with; under CI=true it fails t instead,
// since CI sets it (.ci/run runs scripts/pg-logical). A failure to read
// the setting fails t.
func RequireLogicalDecoding(t testing.TB, db Querier) {
	t.Helper()
	var level string
	if err := db.QueryRow(t.Context(), `SHOW wal_level`).Scan(&level); err != nil {
		t.Fatalf("testdb: read wal_level: %v", err)
	}
	if level != "logical" {
		testenv.SkipOrFail(t, "testdb: logical decoding needs wal_level = logical, and the server has %s: "+
			"run scripts/pg-logical, which sets it and restarts the machine's PostgreSQL (CONTRIBUTING.md)", level)
	}
}
