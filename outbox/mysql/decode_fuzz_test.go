package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/internal/testmysql"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
)

const sqlInsertStoredRow = `
INSERT INTO outbox_event (event_id, event_type, topic, aggregate_type, aggregate_id, tenant_id,
    payload, payload_json, headers, status, attempts, occurred_at, available_at, created_at, updated_at,
    last_error, locked_by, locked_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// FuzzStoredRow stores arbitrary rows with SQL and reads them through the
// store: see [storetest.CheckStoredRow]. The key columns are binary strings
// and hold any bytes; the text columns (headers, last_error) take valid
// UTF-8 only, and give it back as stored.
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
		{ID: "01JSPACES ", EventType: "T ", Topic: " ", AggregateType: "A", AggregateID: " ", Payload: []byte("x"), Headers: " \n{\"k\":\"v\"}\t"},
		{ID: "01JTRAILING", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte("x"), Headers: `{"k":"v"} {}`},
		{ID: "01JFAR", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte("x"), Headers: `{}`, OccurredMicros: -1 << 62},
	}
	for _, s := range seeds {
		f.Add(s.ID, s.EventType, s.Topic, s.AggregateType, s.AggregateID, s.TenantID, s.Payload, s.PayloadJSON,
			s.Headers, s.HeadersNull, s.Status, s.Attempts, s.LastError, s.LockedBy, s.OccurredMicros)
	}
	db := testmysql.New(f)
	store, err := mysql.NewStore(db, mysql.Config{})
	require.NoError(f, err)

	f.Fuzz(func(t *testing.T, id, eventType, topic, aggType, aggID, tenant string, payload []byte, isJSON bool,
		headers string, headersNull bool, status uint8, attempts int64, lastError, lockedBy string, occurredMicros int64) {
		row := storetest.StoredRow{ID: id, EventType: eventType, Topic: topic, AggregateType: aggType, AggregateID: aggID,
			TenantID: tenant, Payload: payload, PayloadJSON: isJSON, Headers: headers, HeadersNull: headersNull,
			Status: status % 4, Attempts: attempts, LastError: lastError, LockedBy: lockedBy, OccurredMicros: occurredMicros}
		_, err := db.ExecContext(t.Context(), `DELETE FROM outbox_event`)
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

// insertStoredRow stores row, and reports false when MySQL refuses it for
// its values (a string that is not UTF-8 in a text column, one too long,
// a number out of range): such a row cannot exist.
func insertStoredRow(t *testing.T, db *sql.DB, row storetest.StoredRow) bool {
	t.Helper()
	orNull := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	var headers, lockedAt any
	if !row.HeadersNull {
		headers = row.Headers
	}
	now := time.Now().Add(-time.Hour).UnixMicro()
	if row.LockedBy != "" {
		lockedAt = now
	}
	_, err := db.ExecContext(context.Background(), sqlInsertStoredRow, row.ID, row.EventType, row.Topic, row.AggregateType,
		orNull(row.AggregateID), orNull(row.TenantID), row.Payload, row.PayloadJSON, headers, int(row.Status), row.Attempts,
		row.OccurredMicros, now, now, now, orNull(row.LastError), orNull(row.LockedBy), lockedAt)
	var mysqlErr *mysqldriver.MySQLError
	if errors.As(err, &mysqlErr) {
		switch mysqlErr.Number {
		case 1264, 1366, 1406: // out of range, incorrect string value, data too long
			return false
		}
	}
	require.NoError(t, err)
	return true
}
