package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// jsonPayload has what a json column must keep as written: spaces, key
// order, a duplicate key and text beyond ASCII.
const jsonPayload = "{\n  \"order\": {\"id\": \"o-1\"}, \"total\": 12,\n  \"note\": \"ünïcødé\", \"total\": 13\n}"

// nulPayload has an escaped NUL, which json keeps, but which its
// operators refuse to turn into text (SQLSTATE 22P05).
const nulPayload = `{"note": "\u0000"}`

// storedPayload is how one row holds its payload.
type storedPayload struct {
	Payload []byte
	Doc     *string // payload_doc as text; nil for NULL
}

func readStored(t *testing.T, pool *pgxpool.Pool, id string) storedPayload {
	t.Helper()
	var s storedPayload
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT payload, payload_doc::text FROM outbox_event WHERE event_id = $1`, id).
		Scan(&s.Payload, &s.Doc))
	return s
}

// Under JSONPayloadColumn every insert statement (one event, many, with
// idempotency keys, hot) writes a JSON payload to payload_doc, which SQL
// reads as JSON, with an empty payload beside it, and a bytes payload to
// payload as without it; the store reads back the bytes written, through
// a store configured either way.
func TestJSONPayloadColumnHoldsJSONPayloads(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{JSONPayloadColumn: true})
	require.NoError(t, err)
	plain, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	cold, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	hot, err := outbox.NewWriter(store, outbox.WriterConfig{HotPath: newHotRecorder()})
	require.NoError(t, err)

	for _, c := range []struct {
		name   string
		writer *outbox.Writer[pgx.Tx]
		events int
		key    bool
	}{
		{"one", cold, 1, false},
		{"many", cold, 2, false},
		{"keyed", cold, 2, true},
		{"hot one", hot, 1, false},
		{"hot many", hot, 2, false},
	} {
		events := make([]outbox.Envelope, 0, 2*c.events)
		for i := range c.events {
			j := outbox.NewJSON("Doc", []byte(jsonPayload))
			b := outbox.NewBytes("Blob", []byte{0, 0xff, '{'})
			if c.key {
				j.IdempotencyKey, b.IdempotencyKey = fmt.Sprint(c.name, i, "j"), fmt.Sprint(c.name, i, "b")
			}
			events = append(events, j, b)
		}
		var ids []string
		require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			ids, err = c.writer.Write(ctx, tx, events[:c.events*2-1]...) // one JSON event more than bytes events
			return err
		}), c.name)
		for i, id := range ids {
			stored := readStored(t, pool, id)
			for _, s := range []*postgres.Store{store, plain} {
				e, err := s.Get(t.Context(), id)
				require.NoError(t, err)
				require.Equal(t, events[i].Payload(), e.Payload(), "%s: the bytes written", c.name)
				require.Equal(t, events[i].IsJSON(), e.IsJSON())
			}
			if !events[i].IsJSON() {
				require.Equal(t, storedPayload{Payload: []byte{0, 0xff, '{'}}, stored, "%s: a bytes payload stays in payload", c.name)
				continue
			}
			require.Equal(t, storedPayload{Payload: []byte{}, Doc: new(jsonPayload)}, stored, "%s: JSON in payload_doc, as written", c.name)
			var total, orderID string
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT payload_doc->>'total', payload_doc#>>'{order,id}'
				FROM outbox_event WHERE event_id = $1`, id).Scan(&total, &orderID))
			require.Equal(t, "13", total, "the last of a duplicate key, as PostgreSQL's json operators read it")
			require.Equal(t, "o-1", orderID)
		}
	}

	id := commit(t, store, outbox.NewJSON("Doc", []byte(nulPayload)))
	require.Equal(t, storedPayload{Payload: []byte{}, Doc: new(nulPayload)}, readStored(t, pool, id[0]))
	e, err := store.Get(t.Context(), id[0])
	require.NoError(t, err)
	require.True(t, bytes.Equal([]byte(nulPayload), e.PayloadJSON), "byte for byte, not only the same JSON: %s", e.PayloadJSON)
}

// Without JSONPayloadColumn, payloads of both kinds go to payload, as
// before migration 7, and payload_doc stays NULL.
func TestJSONPayloadsStayInPayloadByDefault(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	ids := commit(t, store, outbox.NewJSON("Doc", []byte(jsonPayload)), outbox.NewBytes("Blob", []byte{1}))
	require.Equal(t, storedPayload{Payload: []byte(jsonPayload)}, readStored(t, pool, ids[0]))
	require.Equal(t, storedPayload{Payload: []byte{1}}, readStored(t, pool, ids[1]))
}

// A JSON payload that is not UTF-8 passes the envelope's check
// (encoding/json accepts it) but cannot be json text: the write fails
// before it reaches the database, which leaves the transaction usable.
func TestJSONPayloadColumnRefusesPayloadsNotUTF8(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{JSONPayloadColumn: true})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	bad := outbox.NewJSON("Doc", []byte("\"\xff\""))
	bad.ID = "not-utf8"
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, storetest.JSONEvent(1), bad)
		require.ErrorIs(t, err, outbox.ErrInvalidEnvelope)
		require.ErrorContains(t, err, "event not-utf8: the JSON payload is not UTF-8")
		_, err = writer.Write(ctx, tx, storetest.JSONEvent(2))
		return err
	}))
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event`).Scan(&n))
	require.Equal(t, 1, n, "nothing of the refused write")
}

// The down migration of migration 7 moves the JSON payloads back into
// payload before it drops payload_doc, and migrating up again finds
// every payload where the store reads it.
func TestMigration7DownKeepsJSONPayloads(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)
	cfg := postgres.Config{Schema: "shop", Table: "docs_outbox", JSONPayloadColumn: true}
	_, err := pool.Exec(ctx, `CREATE SCHEMA shop`)
	require.NoError(t, err)
	require.NoError(t, postgres.Migrate(ctx, pool, cfg))
	store, err := postgres.NewStore(pool, cfg)
	require.NoError(t, err)
	ids := commit(t, store, outbox.NewJSON("Doc", []byte(jsonPayload)), outbox.NewBytes("Blob", []byte{0xff}))

	migrations, err := postgres.Migrations(cfg)
	require.NoError(t, err)
	seven := migrations[6]
	require.Equal(t, 7, seven.Version)
	_, err = pool.Exec(ctx, seven.Down)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM shop.wmoutbox_migration WHERE table_name = 'docs_outbox' AND version = 7`)
	require.NoError(t, err)
	rows, err := pool.Query(ctx, `SELECT payload FROM shop.docs_outbox WHERE event_id = ANY($1) ORDER BY event_id`, ids)
	require.NoError(t, err)
	payloads, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte(jsonPayload), {0xff}}, payloads, "as written, in payload")
	require.ErrorIs(t, store.Check(ctx), outbox.ErrNotMigrated)

	require.NoError(t, postgres.Migrate(ctx, pool, cfg))
	require.NoError(t, store.Check(ctx))
	e, err := store.Get(ctx, ids[0])
	require.NoError(t, err)
	require.True(t, bytes.Equal([]byte(jsonPayload), e.PayloadJSON), "byte for byte, not only the same JSON: %s", e.PayloadJSON)
}

// The log carries a JSON payload written under JSONPayloadColumn as
// JSON text, as Debezium reads it (docs/debezium.md), and carries a
// transaction's insert even when the transaction deletes the row again.
func TestJSONPayloadColumnIsJSONInTheLog(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)
	testdb.RequireLogicalDecoding(t, pool)
	slot := fmt.Sprintf("wmoutbox_test_docs_%d", time.Now().UnixNano())
	_, err := pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, slot)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, slot)
		require.NoError(t, err)
	})

	store, err := postgres.NewStore(pool, postgres.Config{JSONPayloadColumn: true})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		ids, err := writer.Write(ctx, tx, outbox.NewJSON("Doc", []byte(`{"total": 12}`)))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM outbox_event WHERE event_id = ANY($1)`, ids)
		return err
	}))

	rows, err := pool.Query(ctx, `SELECT data FROM pg_logical_slot_get_changes($1, NULL, NULL)`, slot)
	require.NoError(t, err)
	changes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	var insert, deleted bool
	for _, c := range changes {
		if strings.HasPrefix(c, "table public.outbox_event: INSERT:") {
			insert = true
			require.Contains(t, c, `payload_doc[json]:'{"total": 12}'`)
			require.Contains(t, c, `payload[bytea]:'\x'`)
		}
		deleted = deleted || strings.HasPrefix(c, "table public.outbox_event: DELETE:")
	}
	require.True(t, insert, "the insert is in the log: %q", changes)
	require.True(t, deleted, "so is the delete: %q", changes)
}
