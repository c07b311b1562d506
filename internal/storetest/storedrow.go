package storetest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
// row of an empty table, through store: Get and Claim, which share the row
// decoding. It fails the test unless the row is read without an error and
// with its values as stored; headers that do not decode (as
// [outbox.DecodeHeaders] decodes storedHeaders, the column's text as the
// database returns it, nil for NULL) mark the event Malformed, never
// failing the read or the rest of a claim; and headers that do decode can
// be written and read back unchanged.
func CheckStoredRow[Tx any](t *testing.T, store outbox.TxStore[Tx], row StoredRow, storedHeaders []byte) {
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

	want, wantErr := outbox.DecodeHeaders(storedHeaders)
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
	if p, err := outbox.Prepare([]outbox.Envelope{neighbour}, time.Now()); err == nil && p[0].Topic == row.Topic {
		neighbours++
		require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx Tx) error {
			_, err := writer.Write(ctx, tx, neighbour)
			return err
		}))
	}
	claimed, err := store.Claim(ctx, outbox.ClaimRequest{Owner: "fuzz", Topics: []string{row.Topic}, Limit: 10})
	require.NoError(t, err, "a stored row never fails a claim")
	require.Len(t, claimed, 1+neighbours)
	found := false
	for _, c := range claimed {
		if c.ID != row.ID {
			require.NoError(t, c.Malformed)
			continue
		}
		found = true
		require.Equal(t, e.Malformed != nil, c.Malformed != nil)
		require.Equal(t, e.Headers, c.Headers)
	}
	require.True(t, found, "the stored row is claimed")
}

// requireHeadersWritable writes an event with headers and reads it back:
// whatever the store decodes is what a writer could have written.
func requireHeadersWritable[Tx any](t *testing.T, store outbox.TxStore[Tx], writer *outbox.Writer[Tx], headers map[string]string) {
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
