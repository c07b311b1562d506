package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	modernc "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
)

const sqlInsertStoredRow = `
INSERT INTO outbox_event (event_id, event_type, topic, aggregate_type, aggregate_id, tenant_id,
    payload, payload_json, headers, status, attempts, occurred_at, available_at, created_at, updated_at,
    last_error, locked_by, locked_at)
VALUES (?1, ?2, ?3, ?4, nullif(?5, ''), nullif(?6, ''), ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13, ?13,
    nullif(?14, ''), nullif(?15, ''), CASE WHEN ?15 <> '' THEN ?13 END)`

// FuzzStoredRow stores arbitrary rows with SQL and reads them through the
// store: see [storetest.CheckStoredRow]. SQLite's TEXT columns hold any
// bytes, including invalid UTF-8, NUL and text that is not JSON, and give
// the headers back as stored.
func FuzzStoredRow(f *testing.F) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(f.TempDir(), "outbox.db"))
	require.NoError(f, err)
	f.Cleanup(func() { require.NoError(f, db.Close()) })
	require.NoError(f, sqlite.Migrate(ctx, db, sqlite.Config{}))
	store, err := sqlite.NewStore(db, sqlite.Config{})
	require.NoError(f, err)

	storetest.FuzzSQLStoredRows(f, storetest.TextSeeds, db, store, func(t *testing.T, row storetest.StoredRow) bool {
		return insertStoredRow(t, db, row)
	})
}

// insertStoredRow stores row, and reports false when SQLite refuses it for
// its values (a constraint of the STRICT table): such a row cannot exist.
func insertStoredRow(t *testing.T, db *sql.DB, row storetest.StoredRow) bool {
	t.Helper()
	var headers any
	if !row.HeadersNull {
		headers = row.Headers
	}
	isJSON := 0
	if row.PayloadJSON {
		isJSON = 1
	}
	now := time.Now().Add(-time.Hour).UnixMicro()
	_, err := db.ExecContext(context.Background(), sqlInsertStoredRow, row.ID, row.EventType, row.Topic, row.AggregateType,
		row.AggregateID, row.TenantID, row.Payload, isJSON, headers, int(row.Status), row.Attempts,
		row.OccurredMicros, now, row.LastError, row.LockedBy)
	var sqliteErr *modernc.Error
	if errors.As(err, &sqliteErr) && sqliteErr.Code()&0xff == sqlite3.SQLITE_CONSTRAINT {
		return false
	}
	require.NoError(t, err)
	return true
}
