package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

const sqlInsertStoredRow = `
INSERT INTO outbox_event (event_id, event_type, topic, aggregate_type, aggregate_id, tenant_id,
    payload, payload_json, headers, status, attempts, occurred_at, available_at, created_at, updated_at,
    last_error, locked_by, locked_at)
VALUES ($1, $2, $3, $4, nullif($5, ''), nullif($6, ''), $7, $8, $9::jsonb, $10, $11, $12,
    now() - interval '1 hour', now() - interval '1 hour', now(),
    nullif($13, ''), nullif($14, ''), CASE WHEN $14 <> '' THEN now() - interval '2 hours' END)`

// FuzzStoredRow stores arbitrary rows with SQL, any values the columns'
// types accept, and reads them through the store: see
// [storetest.CheckStoredRow]. The headers column is jsonb, so what is
// decoded as the engine decodes headers is PostgreSQL's text of it.
func FuzzStoredRow(f *testing.F) {
	seeds := []storetest.StoredRow{
		{ID: "01JGOOD", EventType: "OrderCreated", Topic: "orders", AggregateType: "Order", AggregateID: "o-1", TenantID: "t",
			Payload: []byte(`{"a":1}`), PayloadJSON: true, Headers: `{"trace":"abc"}`},
		{ID: "01JNULL", EventType: "T", Topic: "t", AggregateType: "__GLOBAL__", Payload: []byte{0, 0xff}, HeadersNull: true},
		{ID: "01JARRAY", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte("x"), Headers: `[1, 2]`, Status: 2, Attempts: 3},
		{ID: "01JNUMBER", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte{}, Headers: `{"a": 1}`, LastError: "boom"},
		{ID: "01JNULLVALUE", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte("x"), Headers: `{"a": null}`},
		{ID: "01JEMPTYKEY", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte("x"), Headers: `{"": "x"}`, Status: 3},
		{ID: "01JNESTED", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte("x"), Headers: `{"a": {"b": "c"}}`, LockedBy: "relay-1"},
		{ID: "01JSTRING", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte("x"), Headers: `"just a string"`, Status: 1},
		{ID: "01JJSONNULL", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte("x"), Headers: `null`},
		{ID: "01JESCAPES", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte("x"), Headers: `{"\u003c": "\u2028", "ключ": "значение"}`},
		{ID: "01JLATE", EventType: "T", Topic: "t", AggregateType: "A", Payload: []byte("x"), Headers: `{}`, OccurredMicros: -62135596800000000},
	}
	for _, s := range seeds {
		f.Add(s.ID, s.EventType, s.Topic, s.AggregateType, s.AggregateID, s.TenantID, s.Payload, s.PayloadJSON,
			s.Headers, s.HeadersNull, s.Status, int32(s.Attempts), s.LastError, s.LockedBy, s.OccurredMicros)
	}
	pool := testdb.New(f)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(f, err)

	f.Fuzz(func(t *testing.T, id, eventType, topic, aggType, aggID, tenant string, payload []byte, isJSON bool,
		headers string, headersNull bool, status uint8, attempts int32, lastError, lockedBy string, occurredMicros int64) {
		row := storetest.StoredRow{ID: id, EventType: eventType, Topic: topic, AggregateType: aggType, AggregateID: aggID,
			TenantID: tenant, Payload: payload, PayloadJSON: isJSON, Headers: headers, HeadersNull: headersNull,
			Status: status % 4, Attempts: int64(attempts), LastError: lastError, LockedBy: lockedBy, OccurredMicros: occurredMicros}
		ctx := context.Background()
		_, err := pool.Exec(ctx, `DELETE FROM outbox_event`)
		require.NoError(t, err)
		if !insertStoredRow(t, pool, row) {
			return // not a row PostgreSQL stores
		}
		var text *string
		require.NoError(t, pool.QueryRow(ctx, `SELECT headers::text FROM outbox_event WHERE event_id = $1`, row.ID).Scan(&text))
		var stored []byte
		if text != nil {
			stored = []byte(*text)
		}
		storetest.CheckStoredRow(t, store, row, stored)
	})
}

// insertStoredRow stores row, and reports false when PostgreSQL refuses
// it for its values (a data or constraint error): such a row cannot exist.
func insertStoredRow(t *testing.T, pool *pgxpool.Pool, row storetest.StoredRow) bool {
	t.Helper()
	var headers *string
	if !row.HeadersNull {
		headers = &row.Headers
	}
	_, err := pool.Exec(context.Background(), sqlInsertStoredRow, row.ID, row.EventType, row.Topic, row.AggregateType,
		row.AggregateID, row.TenantID, row.Payload, row.PayloadJSON, headers, int16(row.Status), row.Attempts,
		time.UnixMicro(row.OccurredMicros), row.LastError, row.LockedBy)
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
