package storetest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// StoredRow is one outbox row as another writer, a manual fix or a bug
// could leave it in the table, for the stores' fuzz tests.
type StoredRow struct {
	ID, EventType, Topic, AggregateType, AggregateID, TenantID string

	Payload     []byte
	PayloadJSON bool
	Headers     string
	HeadersNull bool

	Status         uint8 // 0 to 3
	Attempts       int64
	LastError      string
	LockedBy       string // locked_at is set with it
	OccurredMicros int64
}

// CheckStoredRow reads row, which the caller stored with SQL as the only
// row of an empty table, through store: Get, and a claim of its driver,
// which share the row decoding. It fails the test unless the row is read
// without an error and with its values as stored; headers that do not
// decode (as the engine decodes storedHeaders, the column's text as the
// database returns it, nil for NULL) mark the event Malformed, never
// failing the read or the rest of a claim; and headers that do decode can
// be written and read back unchanged.
func CheckStoredRow[Tx any](t *testing.T, store *outbox.Store[Tx], row StoredRow, storedHeaders []byte) {
	t.Helper()
	ctx := context.Background()
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)

	e, err := store.Get(ctx, row.ID)
	require.NoError(t, err, "a stored row is always readable")
	require.Equal(t, row.ID, e.ID)
	require.Equal(t, row.EventType, string(e.Type))
	require.Equal(t, row.Topic, e.Topic)
	require.Equal(t, row.AggregateType, string(e.AggregateType))
	require.Equal(t, row.AggregateID, e.AggregateID)
	require.Equal(t, row.TenantID, e.TenantID)
	require.True(t, bytes.Equal(row.Payload, e.Payload()), "payload byte for byte")
	require.NotNil(t, e.Payload(), "an empty payload is empty, not missing")
	require.Equal(t, row.PayloadJSON, e.IsJSON())
	require.Equal(t, outbox.Status(row.Status), e.Status)
	require.Equal(t, int(row.Attempts), e.Attempts)
	require.Equal(t, row.LastError, e.LastError)
	require.Equal(t, row.LockedBy, e.LockedBy)
	require.Equal(t, row.LockedBy != "", !e.LockedAt.IsZero())
	occurred := time.UnixMicro(row.OccurredMicros)
	require.True(t, occurred.Equal(e.OccurredAt), "occurred_at %v, read %v", occurred, e.OccurredAt)

	want, wantErr := codec.DecodeHeaders(string(storedHeaders))
	if wantErr != nil {
		require.Error(t, e.Malformed, "headers %q", storedHeaders)
		require.Nil(t, e.Headers, "a malformed event carries no headers")
	} else {
		require.NoError(t, e.Malformed, "headers %q", storedHeaders)
		require.Equal(t, want, e.Headers)
		requireHeadersWritable(t, store, writer, e.Headers)
	}

	if !e.Status.Pending() || row.LockedBy != "" {
		return
	}
	// A claim returns the row, malformed or not, with a neighbour (when
	// the row's topic is one a writer can write).
	neighbours := 0
	neighbour := outbox.Envelope{Type: "T", Topic: row.Topic, PayloadBytes: []byte("n")}
	var written []string
	err = store.InTx(ctx, func(ctx context.Context, tx Tx) (err error) {
		written, err = writer.Write(ctx, tx, neighbour)
		return err
	})
	if !errors.Is(err, outbox.ErrInvalidEnvelope) {
		require.NoError(t, err)
		if n, err := store.Get(ctx, written[0]); err == nil && n.Topic == row.Topic {
			neighbours++ // not when the topic was empty, and the neighbour's is its type
		}
	}
	now := time.Now()
	claimed, err := store.Driver().Claim(ctx, ClaimParams("fuzz", row.Topic, 10, now))
	require.NoError(t, err, "a stored row never fails a claim")
	require.Len(t, claimed, 1+neighbours)
	found := false
	for _, c := range claimed {
		headers, headersErr := codec.DecodeHeaders(c.Headers)
		if c.ID != row.ID {
			require.NoError(t, c.Malformed)
			require.NoError(t, headersErr)
			continue
		}
		found = true
		require.Equal(t, e.Malformed != nil, c.Malformed != nil || headersErr != nil, "claimed as read")
		require.Equal(t, e.Headers, headers)
	}
	require.True(t, found, "the stored row is claimed")
}

// requireHeadersWritable writes an event with headers and reads it back:
// whatever the store decodes is what a writer could have written.
func requireHeadersWritable[Tx any](t *testing.T, store *outbox.Store[Tx], writer *outbox.Writer[Tx], headers map[string]string) {
	t.Helper()
	ctx := context.Background()
	e := outbox.Envelope{Type: "T", Topic: "headers-round-trip", Headers: headers, PayloadBytes: []byte{}}
	var ids []string
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx Tx) error {
		var err error
		ids, err = writer.Write(ctx, tx, e)
		return err
	}), "decoded headers %q are writable", headers)
	got, err := store.Get(ctx, ids[0])
	require.NoError(t, err)
	require.NoError(t, got.Malformed)
	require.Equal(t, headers, got.Headers)
}

// TextSeeds are seeds of FuzzStoredRows for the stores whose headers
// column is text, given back as stored (SQLite, MySQL).
var TextSeeds = []StoredRow{
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

// FuzzSQLStoredRows is FuzzStoredRow of a database/sql store whose
// headers column is text, given back as stored (SQLite, MySQL): it fuzzes
// rows built from seeds and from the fuzzer's values, each stored with
// insert, the only row of db's outbox table, which reports false for a
// row the table refuses, and read through store (see CheckStoredRow).
func FuzzSQLStoredRows(f *testing.F, seeds []StoredRow, db *sql.DB, store *outbox.Store[*sql.Tx], insert func(t *testing.T, row StoredRow) bool) {
	for _, s := range seeds {
		f.Add(s.ID, s.EventType, s.Topic, s.AggregateType, s.AggregateID, s.TenantID, s.Payload, s.PayloadJSON,
			s.Headers, s.HeadersNull, s.Status, s.Attempts, s.LastError, s.LockedBy, s.OccurredMicros)
	}
	f.Fuzz(func(t *testing.T, id, eventType, topic, aggType, aggID, tenant string, payload []byte, isJSON bool,
		headers string, headersNull bool, status uint8, attempts int64, lastError, lockedBy string, occurredMicros int64) {
		row := StoredRow{ID: id, EventType: eventType, Topic: topic, AggregateType: aggType, AggregateID: aggID,
			TenantID: tenant, Payload: payload, PayloadJSON: isJSON, Headers: headers, HeadersNull: headersNull,
			Status: status % 4, Attempts: attempts, LastError: lastError, LockedBy: lockedBy, OccurredMicros: occurredMicros}
		_, err := db.ExecContext(t.Context(), `DELETE FROM outbox_event`)
		require.NoError(t, err)
		if !insert(t, row) {
			return // not a row the table takes
		}
		var stored []byte
		if !row.HeadersNull {
			stored = []byte(row.Headers)
		}
		CheckStoredRow(t, store, row, stored)
	})
}
