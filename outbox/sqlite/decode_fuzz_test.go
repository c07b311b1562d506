package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	modernc "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
)

// storedRow is one row as another writer, a manual fix or a bug could
// leave it in the table: SQLite's TEXT columns hold any bytes, including
// invalid UTF-8, NUL and text that is not JSON.
type storedRow struct {
	id, eventType, topic, aggType, aggID, tenant string
	payload                                      []byte
	isJSON                                       bool
	headers                                      string
	headersNull                                  bool
	status                                       uint8
	attempts                                     int64
	lastError, lockedBy                          string
	occurredMicros                               int64
}

const sqlInsertStoredRow = `
INSERT INTO outbox_event (event_id, event_type, topic, aggregate_type, aggregate_id, tenant_id,
    payload, payload_json, headers, status, attempts, occurred_at, available_at, created_at, updated_at,
    last_error, locked_by, locked_at)
VALUES (?1, ?2, ?3, ?4, nullif(?5, ''), nullif(?6, ''), ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13, ?13,
    nullif(?14, ''), nullif(?15, ''), CASE WHEN ?15 <> '' THEN ?13 END)`

// FuzzStoredRow stores arbitrary rows with SQL and reads them through the
// store (Get and Claim, which share the row decoding): every stored row is
// read without an error and with its values as stored; headers that do
// not decode mark the event Malformed (never failing the read or the rest
// of a claim), and headers that do decode can be written and read back
// unchanged.
func FuzzStoredRow(f *testing.F) {
	seeds := []storedRow{
		{id: "01JGOOD", eventType: "OrderCreated", topic: "orders", aggType: "Order", aggID: "o-1", tenant: "t",
			payload: []byte(`{"a":1}`), isJSON: true, headers: `{"trace":"abc"}`},
		{id: "01JNULL", eventType: "T", topic: "t", aggType: "__GLOBAL__", payload: []byte{0, 0xff}, headersNull: true},
		{id: "01JNOTJSON", eventType: "T", topic: "t", aggType: "A", payload: []byte("x"), headers: `{"a": `, status: 2, attempts: 3},
		{id: "01JNUMBER", eventType: "T", topic: "t", aggType: "A", payload: []byte{}, headers: `{"a": 1}`, lastError: "boom"},
		{id: "01JNULVALUE", eventType: "T", topic: "t", aggType: "A", payload: []byte("x"), headers: `{"a": "\u0000"}`},
		{id: "01JBADUTF8", eventType: "T\xff", topic: "t", aggType: "A", payload: []byte("x"), headers: "{\"a\": \"\xfe\"}", status: 3},
		{id: "01J\x00NUL", eventType: "T", topic: "t\x00", aggType: "A", payload: []byte("x"), headers: "\x00", lockedBy: "relay-1"},
		{id: "01JEMPTY", eventType: "T", topic: "t", aggType: "A", payload: []byte("x"), headers: ``, status: 1},
		{id: "01JSPACES", eventType: "T", topic: "t", aggType: "A", payload: []byte("x"), headers: " \n{\"k\":\"v\"}\t"},
		{id: "01JTRAILING", eventType: "T", topic: "t", aggType: "A", payload: []byte("x"), headers: `{"k":"v"} {}`},
		{id: "01JFAR", eventType: "T", topic: "t", aggType: "A", payload: []byte("x"), headers: `{}`, occurredMicros: -1 << 62},
	}
	for _, s := range seeds {
		f.Add(s.id, s.eventType, s.topic, s.aggType, s.aggID, s.tenant, s.payload, s.isJSON, s.headers, s.headersNull,
			s.status, s.attempts, s.lastError, s.lockedBy, s.occurredMicros)
	}
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(f.TempDir(), "outbox.db"))
	require.NoError(f, err)
	f.Cleanup(func() { require.NoError(f, db.Close()) })
	require.NoError(f, sqlite.Migrate(ctx, db, sqlite.Config{}))
	store, err := sqlite.NewStore(db, sqlite.Config{})
	require.NoError(f, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(f, err)

	f.Fuzz(func(t *testing.T, id, eventType, topic, aggType, aggID, tenant string, payload []byte, isJSON bool,
		headers string, headersNull bool, status uint8, attempts int64, lastError, lockedBy string, occurredMicros int64) {
		row := storedRow{id, eventType, topic, aggType, aggID, tenant, payload, isJSON, headers, headersNull,
			status % 4, attempts, lastError, lockedBy, occurredMicros}
		_, err := db.ExecContext(ctx, `DELETE FROM outbox_event`)
		require.NoError(t, err)
		if !insertStoredRow(t, db, row) {
			return // not a row the table takes
		}

		e, err := store.Get(ctx, row.id)
		require.NoError(t, err, "a stored row is always readable")
		require.Equal(t, row.id, e.ID)
		require.Equal(t, row.eventType, string(e.Type))
		require.Equal(t, row.topic, e.Topic)
		require.Equal(t, row.aggType, string(e.AggregateType))
		require.Equal(t, row.aggID, e.AggregateID)
		require.Equal(t, row.tenant, e.TenantID)
		require.True(t, bytes.Equal(row.payload, e.Payload()), "payload byte for byte")
		require.NotNil(t, e.Payload(), "an empty payload is empty, not missing")
		require.Equal(t, row.isJSON, e.IsJSON())
		require.Equal(t, outbox.Status(row.status), e.Status)
		require.Equal(t, int(row.attempts), e.Attempts)
		require.Equal(t, row.lastError, e.LastError)
		require.Equal(t, row.lockedBy, e.LockedBy)
		require.Equal(t, row.lockedBy != "", !e.LockedAt.IsZero())
		require.Equal(t, time.UnixMicro(row.occurredMicros).UTC(), e.OccurredAt)

		var stored []byte
		if !row.headersNull {
			stored = []byte(row.headers)
		}
		want, wantErr := outbox.DecodeHeaders(stored)
		if wantErr != nil {
			require.Error(t, e.Malformed, "headers %q", stored)
			require.Nil(t, e.Headers, "a malformed event carries no headers")
		} else {
			require.NoError(t, e.Malformed, "headers %q", stored)
			require.Equal(t, want, e.Headers)
			requireHeadersWritable(t, store, writer, e.Headers)
		}

		// A claim returns the row, malformed or not, with a neighbour
		// (when the row's topic is one a writer can write).
		if e.Status.Pending() && row.lockedBy == "" {
			neighbours := 0
			neighbour := outbox.Envelope{Type: "T", Topic: row.topic, PayloadBytes: []byte("n")}
			if p, err := outbox.Prepare([]outbox.Envelope{neighbour}, time.Now()); err == nil && p[0].Topic == row.topic {
				neighbours++
				require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
					_, err := writer.Write(ctx, tx, neighbour)
					return err
				}))
			}
			claimed, err := store.Claim(ctx, outbox.ClaimRequest{Owner: "fuzz", Topics: []string{row.topic}, Limit: 10})
			require.NoError(t, err, "a stored row never fails a claim")
			require.Len(t, claimed, 1+neighbours)
			var found bool
			for _, c := range claimed {
				if c.ID == row.id {
					found = true
					require.Equal(t, e.Malformed != nil, c.Malformed != nil)
					require.Equal(t, e.Headers, c.Headers)
				}
			}
			require.True(t, found, "the stored row is claimed: %d claimed", len(claimed))
		}
	})
}

// insertStoredRow stores row, and reports false when SQLite refuses it for
// its values (a constraint of the STRICT table): such a row cannot exist.
func insertStoredRow(t *testing.T, db *sql.DB, row storedRow) bool {
	t.Helper()
	var headers any
	if !row.headersNull {
		headers = row.headers
	}
	isJSON := 0
	if row.isJSON {
		isJSON = 1
	}
	now := time.Now().Add(-time.Hour).UnixMicro()
	_, err := db.ExecContext(context.Background(), sqlInsertStoredRow, row.id, row.eventType, row.topic, row.aggType,
		row.aggID, row.tenant, row.payload, isJSON, headers, int(row.status), row.attempts,
		row.occurredMicros, now, row.lastError, row.lockedBy)
	var sqliteErr *modernc.Error
	if errors.As(err, &sqliteErr) && sqliteErr.Code()&0xff == sqlite3.SQLITE_CONSTRAINT {
		return false
	}
	require.NoError(t, err)
	return true
}

// requireHeadersWritable writes an event with headers and reads it back:
// whatever the store decodes is what a writer could have written.
func requireHeadersWritable(t *testing.T, store *sqlite.Store, writer *outbox.Writer[*sql.Tx], headers map[string]string) {
	t.Helper()
	ctx := context.Background()
	e := outbox.Envelope{Type: "T", Topic: "headers-round-trip", Headers: headers, PayloadBytes: []byte{}}
	var ids []string
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		ids, err = writer.Write(ctx, tx, e)
		return err
	}), "decoded headers %q are writable", headers)
	got, err := store.Get(ctx, ids[0])
	require.NoError(t, err)
	require.NoError(t, got.Malformed)
	require.Equal(t, headers, got.Headers)
}
