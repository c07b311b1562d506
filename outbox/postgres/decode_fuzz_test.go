package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// storedRow is one row as another writer, a manual fix or a bug could
// leave it in the table: any values the columns' types accept.
type storedRow struct {
	id, eventType, topic, aggType, aggID, tenant string
	payload                                      []byte
	isJSON                                       bool
	headers                                      string
	headersNull                                  bool
	status                                       uint8
	attempts                                     int32
	lastError, lockedBy                          string
	occurredMicros                               int64
}

const sqlInsertStoredRow = `
INSERT INTO outbox_event (event_id, event_type, topic, aggregate_type, aggregate_id, tenant_id,
    payload, payload_json, headers, status, attempts, occurred_at, available_at, created_at, updated_at,
    last_error, locked_by, locked_at)
VALUES ($1, $2, $3, $4, nullif($5, ''), nullif($6, ''), $7, $8, $9::jsonb, $10, $11, $12,
    now() - interval '1 hour', now() - interval '1 hour', now(),
    nullif($13, ''), nullif($14, ''), CASE WHEN $14 <> '' THEN now() - interval '2 hours' END)`

// FuzzStoredRow stores arbitrary rows with SQL and reads them through the
// store (Get and Claim, which share the row decoding): a row PostgreSQL
// accepted is always read without an error and with its values as stored;
// headers that do not decode mark the event Malformed (never failing the
// read or the rest of a claim), and headers that do decode can be written
// and read back unchanged.
func FuzzStoredRow(f *testing.F) {
	seeds := []storedRow{
		{id: "01JGOOD", eventType: "OrderCreated", topic: "orders", aggType: "Order", aggID: "o-1", tenant: "t",
			payload: []byte(`{"a":1}`), isJSON: true, headers: `{"trace":"abc"}`},
		{id: "01JNULL", eventType: "T", topic: "t", aggType: "__GLOBAL__", payload: []byte{0, 0xff}, headersNull: true},
		{id: "01JARRAY", eventType: "T", topic: "t", aggType: "A", payload: []byte("x"), headers: `[1, 2]`, status: 2, attempts: 3},
		{id: "01JNUMBER", eventType: "T", topic: "t", aggType: "A", payload: []byte{}, headers: `{"a": 1}`, lastError: "boom"},
		{id: "01JNULLVALUE", eventType: "T", topic: "t", aggType: "A", payload: []byte("x"), headers: `{"a": null}`},
		{id: "01JEMPTYKEY", eventType: "T", topic: "t", aggType: "A", payload: []byte("x"), headers: `{"": "x"}`, status: 3},
		{id: "01JNESTED", eventType: "T", topic: "t", aggType: "A", payload: []byte("x"), headers: `{"a": {"b": "c"}}`, lockedBy: "relay-1"},
		{id: "01JSTRING", eventType: "T", topic: "t", aggType: "A", payload: []byte("x"), headers: `"just a string"`, status: 1},
		{id: "01JJSONNULL", eventType: "T", topic: "t", aggType: "A", payload: []byte("x"), headers: `null`},
		{id: "01JESCAPES", eventType: "T", topic: "t", aggType: "A", payload: []byte("x"), headers: `{"\u003c": "\u2028", "ключ": "значение"}`},
		{id: "01JLATE", eventType: "T", topic: "t", aggType: "A", payload: []byte("x"), headers: `{}`, occurredMicros: -62135596800000000},
	}
	for _, s := range seeds {
		f.Add(s.id, s.eventType, s.topic, s.aggType, s.aggID, s.tenant, s.payload, s.isJSON, s.headers, s.headersNull,
			s.status, s.attempts, s.lastError, s.lockedBy, s.occurredMicros)
	}
	pool := testdb.New(f)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(f, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(f, err)

	f.Fuzz(func(t *testing.T, id, eventType, topic, aggType, aggID, tenant string, payload []byte, isJSON bool,
		headers string, headersNull bool, status uint8, attempts int32, lastError, lockedBy string, occurredMicros int64) {
		row := storedRow{id, eventType, topic, aggType, aggID, tenant, payload, isJSON, headers, headersNull,
			status % 4, attempts, lastError, lockedBy, occurredMicros}
		ctx := context.Background()
		_, err := pool.Exec(ctx, `DELETE FROM outbox_event`)
		require.NoError(t, err)
		if !insertStoredRow(t, pool, row) {
			return // not a row PostgreSQL stores
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
		require.True(t, time.UnixMicro(row.occurredMicros).Equal(e.OccurredAt), "occurred_at %v, read %v", time.UnixMicro(row.occurredMicros), e.OccurredAt)

		// The headers decode as outbox.DecodeHeaders decodes the stored text.
		var text *string
		require.NoError(t, pool.QueryRow(ctx, `SELECT headers::text FROM outbox_event WHERE event_id = $1`, row.id).Scan(&text))
		var stored []byte
		if text != nil {
			stored = []byte(*text)
		}
		want, wantErr := outbox.DecodeHeaders(stored)
		if wantErr != nil {
			require.Error(t, e.Malformed, "headers %s", stored)
			require.Nil(t, e.Headers, "a malformed event carries no headers")
		} else {
			require.NoError(t, e.Malformed, "headers %s", stored)
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
				require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
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
				} else {
					require.NoError(t, c.Malformed)
				}
			}
			require.True(t, found, "the stored row is claimed")
		}
	})
}

// insertStoredRow stores row, and reports false when PostgreSQL refuses
// it for its values (a data or constraint error): such a row cannot exist.
func insertStoredRow(t *testing.T, pool *pgxpool.Pool, row storedRow) bool {
	t.Helper()
	var headers *string
	if !row.headersNull {
		headers = &row.headers
	}
	_, err := pool.Exec(context.Background(), sqlInsertStoredRow, row.id, row.eventType, row.topic, row.aggType,
		row.aggID, row.tenant, row.payload, row.isJSON, headers, int16(row.status), row.attempts,
		time.UnixMicro(row.occurredMicros), row.lastError, row.lockedBy)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return true
	case errors.As(err, &pgErr) && (pgErr.Code[:2] == "22" || pgErr.Code[:2] == "23"):
		return false
	}
	require.NoError(t, err)
	return false
}

// requireHeadersWritable writes an event with headers and reads it back:
// whatever the store decodes is what a writer could have written.
func requireHeadersWritable(t *testing.T, store *postgres.Store, writer *outbox.Writer[pgx.Tx], headers map[string]string) {
	t.Helper()
	ctx := context.Background()
	e := outbox.Envelope{Type: "T", Topic: "headers-round-trip", Headers: headers, PayloadBytes: []byte{}}
	var ids []string
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		ids, err = writer.Write(ctx, tx, e)
		return err
	}), "decoded headers %q are writable", headers)
	got, err := store.Get(ctx, ids[0])
	require.NoError(t, err)
	require.NoError(t, got.Malformed)
	require.Equal(t, headers, got.Headers)
}
