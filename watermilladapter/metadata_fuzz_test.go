package watermilladapter

import (
	"bytes"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// FuzzStoredMessage follows a Watermill message through the outbox: to an
// envelope (Publish), to the stored form of its headers and back (what a
// row gives the relay), to the message a handler receives. Whatever the
// publisher accepts comes back with the same UUID, payload and metadata.
// And any headers a stored row decodes to make a message without panic,
// carrying the event id.
func FuzzStoredMessage(f *testing.F) {
	seeds := []struct {
		uuid            string
		payload         []byte
		k1, v1, k2, v2  string
		storedHeaders   []byte
		aggregateID     string
		deliverAfterRFC string
	}{
		{"6ba7b810-9dad-11d1-80b4-00c04fd430c8", []byte(`{"a":1}`), "traceparent", "00-abc-01", "x-seq", "1", []byte(`{"a":"b"}`), "order-1", ""},
		{"u", []byte{}, MetadataEventID, "01JCHOSEN", MetadataSource, "cold", []byte(`{"outbox_message_uuid":"from-a-row"}`), "", "2030-01-02T03:04:05Z"},
		{"u", nil, headerMessageUUID, "spoofed", MetadataAttempt, "7", []byte(`{"outbox_message_uuid":""}`), "", ""},
		{"ключ", []byte{0, 0xff}, "ключ", "значение", "<>&", "\u2028", []byte(`{"":"x"}`), "agg\x00", "tomorrow"},
		{"u", []byte("x"), "k\xff", "v", "k", "v\x00", []byte(`[1]`), "", ""},
		{"u", []byte("x"), MetadataDeliverIn, "90s", "x-seq", "1", []byte(`{}`), "", ""},
		{"u", []byte("x"), MetadataDeliverIn, "-1h", "x-seq", "1", []byte(`{}`), "", ""},
		{"u", []byte("x"), MetadataDeliverIn, "soon", "k", "v", []byte(`{}`), "", "2030-01-02T03:04:05Z"},
	}
	for _, s := range seeds {
		f.Add(s.uuid, s.payload, s.k1, s.v1, s.k2, s.v2, s.storedHeaders, s.aggregateID, s.deliverAfterRFC)
	}
	clock := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

	f.Fuzz(func(t *testing.T, uuid string, payload []byte, k1, v1, k2, v2 string, storedHeaders []byte,
		aggregateID, deliverAfter string) {
		// Any headers a row decodes to make a message.
		if headers, err := codec.DecodeHeaders(string(storedHeaders)); err == nil {
			row := outboxdriver.Row{ID: "01JSTORED", Type: "T", Topic: "t", Payload: payload}
			msg := toMessage(&queued{row: row, headers: headers, source: SourceCold})
			require.Equal(t, "01JSTORED", msg.Metadata.Get(MetadataEventID))
			require.NotEmpty(t, msg.UUID)
		}

		msg := message.NewMessage(uuid, payload)
		msg.Metadata.Set(k1, v1)
		msg.Metadata.Set(k2, v2)
		if aggregateID != "" {
			msg.Metadata.Set(MetadataAggregateID, aggregateID)
		}
		if deliverAfter != "" {
			msg.Metadata.Set(MetadataDeliverAfter, deliverAfter)
		}
		// Published through a writer, whatever the driver stores comes
		// back.
		driver := &insertDriver{}
		pub, err := NewPublisher(fakeStore(t, driver, clock), PublisherConfig{})
		require.NoError(t, err)
		if err := pub.WithTx(fakeTx{}).Publish("orders", msg); err != nil {
			require.ErrorIs(t, err, outbox.ErrInvalidEnvelope)
			return
		}
		require.Len(t, driver.rows, 1)
		row := storedRow(&driver.rows[0])
		headers, err := codec.DecodeHeaders(row.Headers)
		require.NoError(t, err, "headers the writer accepted decode")
		got := toMessage(&queued{row: row, headers: headers, source: SourceHot})

		if uuid != "" {
			// An empty UUID is no UUID: the handler then sees the event id.
			require.Equal(t, uuid, got.UUID)
		}
		require.True(t, bytes.Equal(payload, got.Payload), "payload byte for byte")
		require.Equal(t, row.ID, got.Metadata.Get(MetadataEventID))
		require.Equal(t, "1", got.Metadata.Get(MetadataAttempt))
		require.Equal(t, SourceHot, got.Metadata.Get(MetadataSource))
		require.Equal(t, aggregateID, got.Metadata.Get(MetadataAggregateID))
		for k, v := range msg.Metadata {
			switch {
			case k == headerMessageUUID || k == MetadataAttempt || k == MetadataSource:
				// Set by the outbox, never taken from the publisher.
				require.NotContains(t, got.Metadata, headerMessageUUID)
			case k == MetadataDeliverAfter || k == MetadataOccurredAt:
				// Times are parsed, and come back formatted.
			case k == MetadataDeliverIn:
				// A delay is spent by the time of delivery.
				require.NotContains(t, got.Metadata, k)
			case k == MetadataEventType && v == "":
				require.Equal(t, "orders", got.Metadata.Get(k), "the type defaults to the topic")
			case k == MetadataAggregateType && v == "":
				require.Equal(t, string(outbox.GlobalAggregate), got.Metadata.Get(k))
			case (k == MetadataAggregateID || k == MetadataTenantID || k == MetadataEventID) && v == "":
			default:
				require.Equal(t, v, got.Metadata.Get(k), "metadata %q", k)
			}
		}
	})
}
