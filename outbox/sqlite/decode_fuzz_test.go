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
	seeds := []storetest.StoredRow{
		{ID: "01JGOOD", EventType: "OrderCreated", Topic: "orders", AggregateType: "Order", AggregateID: "o-1", TenantID: "t",
			Payload: []byte(`{"a":1}`), PayloadJSON: true, Headers: `{"trace":"abc"}`},
		{ID: "01JNULL", EventType: "T", Topic: "t", AggregateType: "__GLOBAL__", Payload: []byte{0, 0xff}, HeadersNull: true},
		{ID: "01JNOTJSON", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte("x"), Headers: `{"a": `, Status: 2, Attempts: 3},
		{ID: "01JNUMBER", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte{}, Headers: `{"a": 1}`, LastError: "boom"},
		{ID: "01JNULVALUE", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte("x"), Headers: `{"a": "\u0000"}`},
		{ID: "01JBADUTF8", EventType: "T\xff", Topic: "t", AggregateType: "A", Payload: []byte("x"), Headers: "{\"a\": \"\xfe\"}", Status: 3},
		{ID: "01J\x00NUL", EventType: "T", Topic: "t\x00", AggregateType: "A", Payload: []byte("x"), Headers: "\x00", LockedBy: "relay-1"},
		{ID: "01JEMPTY", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte("x"), Headers: ``, Status: 1},
		{ID: "01JSPACES", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte("x"), Headers: " \n{\"k\":\"v\"}\t"},
		{ID: "01JTRAILING", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte("x"), Headers: `{"k":"v"} {}`},
		{ID: "01JFAR", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte("x"), Headers: `{}`, OccurredMicros: -1 << 62},
	}
	for _, s := range seeds {
		f.Add(s.ID, s.EventType, s.Topic, s.AggregateType, s.AggregateID, s.TenantID, s.Payload, s.PayloadJSON,
			s.Headers, s.HeadersNull, s.Status, s.Attempts, s.LastError, s.LockedBy, s.OccurredMicros)
	}
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(f.TempDir(), "outbox.db"))
	require.NoError(f, err)
	f.Cleanup(func() { require.NoError(f, db.Close()) })
	require.NoError(f, sqlite.Migrate(ctx, db, sqlite.Config{}))
	store, err := sqlite.NewStore(db, sqlite.Config{})
	require.NoError(f, err)

	f.Fuzz(func(t *testing.T, id, eventType, topic, aggType, aggID, tenant string, payload []byte, isJSON bool,
		headers string, headersNull bool, status uint8, attempts int64, lastError, lockedBy string, occurredMicros int64) {
		row := storetest.StoredRow{ID: id, EventType: eventType, Topic: topic, AggregateType: aggType, AggregateID: aggID,
			TenantID: tenant, Payload: payload, PayloadJSON: isJSON, Headers: headers, HeadersNull: headersNull,
			Status: status % 4, Attempts: attempts, LastError: lastError, LockedBy: lockedBy, OccurredMicros: occurredMicros}
		_, err := db.ExecContext(ctx, `DELETE FROM outbox_event`)
		require.NoError(t, err)
		if !insertStoredRow(t, db, row) {
			return // not a row the table takes
		}
		var stored []byte
		if !row.HeadersNull {
			stored = []byte(row.Headers)
		}
		storetest.CheckStoredRow(t, store, row, stored)
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
