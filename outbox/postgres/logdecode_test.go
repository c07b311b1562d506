package postgres_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// logRow is an inserted row as pgoutput sends it: the column names of the
// table, in an order of their own, and the text of each value.
var logRow = []struct {
	column string
	value  string
}{
	{"seq", "17"},
	{"event_id", "01JLOG"},
	{"event_type", "OrderPlaced"},
	{"topic", "orders"},
	{"aggregate_type", "Order"},
	{"aggregate_id", "o-1"},
	{"tenant_id", "t-1"},
	{"payload", `\x00ff5c78`},
	{"payload_json", "f"},
	{"headers", `{"a": "b"}`},
	{"status", "0"},
	{"attempts", "0"},
	{"occurred_at", "2026-03-04 05:06:07.123456+05:30"},
	{"available_at", "2026-03-04 00:00:00+00"},
	{"created_at", "2026-03-04 00:00:00.5+00"},
	{"updated_at", "2026-03-04 00:00:00.5+00"},
	{"done_at", ""},
	{"last_error", ""},
	{"locked_by", ""},
	{"locked_at", ""},
	{"locked_until", ""},
	{"error_group", ""},
	{"idempotency_key", "k-1"},
}

// decodeLogRow decodes logRow with the values of change in place of its
// own ("" is NULL), and the extra columns appended.
func decodeLogRow(change map[string]string, extra ...[2]string) outboxdriver.Row {
	var (
		columns []string
		values  [][]byte
	)
	add := func(column, value string) {
		columns = append(columns, column)
		if value == "" {
			values = append(values, nil)
		} else {
			values = append(values, []byte(value))
		}
	}
	for _, c := range logRow {
		value := c.value
		if v, ok := change[c.column]; ok {
			value = v
		}
		add(c.column, value)
	}
	for _, c := range extra {
		add(c[0], c[1])
	}
	return postgres.DecodeLogRow(columns, values)
}

func TestDecodeLogRow(t *testing.T) {
	t.Parallel()
	row := decodeLogRow(nil)
	require.NoError(t, row.Malformed)
	require.Equal(t, outboxdriver.Row{
		ID: "01JLOG", Type: "OrderPlaced", Topic: "orders", AggregateType: "Order", AggregateID: "o-1", TenantID: "t-1",
		Payload: []byte{0, 0xff, '\\', 'x'}, Headers: `{"a": "b"}`,
		OccurredAt:     time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.FixedZone("", 5*3600+1800)).In(time.Local),
		AvailableAt:    time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC).In(time.Local),
		CreatedAt:      time.Date(2026, 3, 4, 0, 0, 0, 500000000, time.UTC).In(time.Local),
		UpdatedAt:      time.Date(2026, 3, 4, 0, 0, 0, 500000000, time.UTC).In(time.Local),
		IdempotencyKey: "k-1", Seq: 17,
	}, row)

	t.Run("an empty payload is not nil", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, []byte{}, decodeLogRow(map[string]string{"payload": `\x`}).Payload)
	})
	t.Run("a JSON document in payload_doc is the payload", func(t *testing.T) {
		t.Parallel()
		row := decodeLogRow(map[string]string{"payload": `\x`, "payload_json": "t"}, [2]string{"payload_doc", `{"b":1,  "a":2}`})
		require.NoError(t, row.Malformed)
		require.Equal(t, []byte(`{"b":1,  "a":2}`), row.Payload)
		require.True(t, row.PayloadJSON)
	})
	t.Run("a NULL payload_doc leaves the bytes payload", func(t *testing.T) {
		t.Parallel()
		row := decodeLogRow(nil, [2]string{"payload_doc", ""})
		require.Equal(t, []byte{0, 0xff, '\\', 'x'}, row.Payload)
		require.False(t, row.PayloadJSON)
	})
}

// A value that cannot be read makes the row malformed, for the relay to
// record DEAD with the reason; the rest of the row is read, its id first.
func TestDecodeLogRowMalformed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change map[string]string
		reason string
	}{
		{"timestamp that is not a time", map[string]string{"occurred_at": "yesterday"}, "occurred_at"},
		{"infinite timestamp", map[string]string{"available_at": "infinity"}, "available_at is infinity, not a time"},
		{"minus infinity", map[string]string{"created_at": "-infinity"}, "created_at is -infinity, not a time"},
		{"timestamp without offset", map[string]string{"updated_at": "2026-03-04 00:00:00"}, "updated_at"},
		{"bytea not in hex", map[string]string{"payload": `abc`}, "payload"},
		{"odd hex", map[string]string{"payload": `\x0`}, "payload"},
		{"boolean", map[string]string{"payload_json": "yes"}, `payload_json is "yes", not a boolean`},
		{"status out of range", map[string]string{"status": "70000"}, "status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			row := decodeLogRow(tc.change)
			require.ErrorContains(t, row.Malformed, tc.reason)
			require.Equal(t, "01JLOG", row.ID)
			require.Equal(t, "orders", row.Topic)
		})
	}
}

// FuzzDecodeLogRow decodes arbitrary text in the columns: never a panic,
// and the row keeps its id, which the relay needs to record it DEAD.
func FuzzDecodeLogRow(f *testing.F) {
	f.Add("01J", `\x00`, "t", `{}`, "0", "2026-03-04 00:00:00+00", "2026-03-04 05:06:07.123456-07:30:15")
	f.Add("", `\x`, "f", `null`, "-1", "infinity", "0001-01-01 00:00:00+00 BC")
	f.Add("x", `\xzz`, "", "", "", "", "")
	f.Fuzz(func(t *testing.T, id, payload, isJSON, headers, status, occurred, available string) {
		row := decodeLogRow(map[string]string{"event_id": id, "payload": payload, "payload_json": isJSON,
			"headers": headers, "status": status, "occurred_at": occurred, "available_at": available})
		require.Equal(t, id, row.ID)
		require.NotNil(t, row.Payload)
	})
}

// insertBody is the body of a pgoutput Insert message of relation 1 with
// values in text, nil for NULL.
func insertBody(values ...[]byte) []byte {
	body := []byte{0, 0, 0, 1, 'N', byte(len(values) >> 8), byte(len(values))}
	for _, v := range values {
		if v == nil {
			body = append(body, 'n')
			continue
		}
		body = append(body, 't')
		body = binary.BigEndian.AppendUint32(body, uint32(len(v)))
		body = append(body, v...)
	}
	return body
}

func TestDecodeLogInsert(t *testing.T) {
	t.Parallel()
	columns := []string{"event_id", "tenant_id", "payload"}
	rows, err := postgres.DecodeLogInsert(columns, insertBody([]byte("01JA"), nil, []byte(`\x6869`)))
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, "01JA", rows[0].ID)
	require.Empty(t, rows[0].TenantID)
	require.Equal(t, []byte("hi"), rows[0].Payload)

	body := insertBody([]byte("01JA"), nil, []byte(`\x6869`))
	for cut := range len(body) - 1 {
		_, err := postgres.DecodeLogInsert(columns, body[:cut])
		require.Error(t, err, "a message cut at %d bytes", cut)
	}
}

// FuzzDecodeLogInsert decodes arbitrary Insert messages: an error or
// rows, never a panic.
func FuzzDecodeLogInsert(f *testing.F) {
	f.Add(insertBody([]byte("01JA"), nil, []byte(`\x6869`)))
	f.Add(insertBody())
	f.Add([]byte{0, 0, 0, 1, 'N', 0xff, 0xff, 't', 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, body []byte) {
		rows, err := postgres.DecodeLogInsert([]string{"event_id", "payload", "occurred_at"}, body)
		if err == nil {
			for _, r := range rows {
				require.NotNil(t, r.Payload)
			}
		}
	})
}

func TestCheckWALLevel(t *testing.T) {
	t.Parallel()
	require.NoError(t, postgres.CheckWALLevel("logical"))
	for _, level := range []string{"replica", "minimal", ""} {
		err := postgres.CheckWALLevel(level)
		require.ErrorIs(t, err, postgres.ErrLogicalDecodingOff)
		require.ErrorContains(t, err, "wal_level is "+level+",")
		require.ErrorContains(t, err, "set wal_level = logical")
		require.ErrorContains(t, err, "restart the server")
	}
}
