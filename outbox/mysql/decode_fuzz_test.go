package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
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
	// Keys that differ from the empty string by spaces alone, which MySQL's
	// text comparisons would take for it.
	spaces := storetest.StoredRow{ID: "01JBLANK ", EventType: "T ", Topic: " ", AggregateType: "A", AggregateID: " ",
		Payload: []byte("x"), Headers: "{}"}
	seeds := append(slices.Clone(storetest.TextSeeds), spaces)
	db := testmysql.New(f)
	store, err := mysql.NewStore(db, mysql.Config{})
	require.NoError(f, err)

	storetest.FuzzSQLStoredRows(f, seeds, db, store, func(t *testing.T, row storetest.StoredRow) bool {
		return insertStoredRow(t, db, row)
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
