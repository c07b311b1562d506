package kafkaforward

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// forwardedMessage is an outbox event as the forward handler publishes it.
func forwardedMessage() *message.Message {
	msg := message.NewMessage("6f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60", []byte(`{"orderId":"9f1c2e4a","total":"188.98"}`))
	msg.Metadata.Set(watermilladapter.MetadataEventID, "01KAQ7Z4V5J8M2N6P9R3T7W1XY")
	msg.Metadata.Set(watermilladapter.MetadataEventType, "OrderCreated")
	msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
	msg.Metadata.Set(watermilladapter.MetadataAggregateID, "9f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60")
	msg.Metadata.Set(watermilladapter.MetadataOccurredAt, "2026-11-23T16:35:53.123456Z")
	msg.Metadata.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	msg.Metadata.Set("empty", "")
	return msg
}

// theirs is watermill-kafka's record for msg, as its partitioning
// marshaler (pkg/kafka/marshaler.go) builds it: [PartitionKey] as key, the
// payload as value, the message UUID in header _watermill_message_uuid and
// one header per metadata entry; the headers by key. It is written out
// here, so that the library's tests need no watermill-kafka (and no
// Sarama) in its go.mod: the interop module (forward/kafkaforward/interop)
// compares kafkaforward's records with the marshaler's own.
func theirs(t *testing.T, msg *message.Message) (key, value []byte, headers map[string]string) {
	t.Helper()
	k, err := PartitionKey("orders", msg)
	require.NoError(t, err)
	headers = map[string]string{"_watermill_message_uuid": msg.UUID}
	for mk, v := range msg.Metadata {
		headers[mk] = v
	}
	return []byte(k), msg.Payload, headers
}

// ours is newRecord's record for msg, its headers by key.
func ours(t *testing.T, msg *message.Message) (rec *kgo.Record, headers map[string]string) {
	t.Helper()
	rec, err := newRecord("orders", msg)
	require.NoError(t, err)
	return rec, recordHeaders(t, rec)
}

func recordHeaders(t *testing.T, rec *kgo.Record) map[string]string {
	t.Helper()
	headers := make(map[string]string, len(rec.Headers))
	for _, h := range rec.Headers {
		require.NotContains(t, headers, h.Key, "one header per key")
		headers[h.Key] = string(h.Value)
	}
	return headers
}

func TestNewRecordBuildsWatermillKafkasRecord(t *testing.T) {
	t.Parallel()
	for name, msg := range map[string]*message.Message{
		"outbox event": forwardedMessage(),
		"no aggregate": func() *message.Message {
			m := forwardedMessage()
			delete(m.Metadata, watermilladapter.MetadataAggregateID)
			return m
		}(),
		"not an outbox": message.NewMessage("uuid-1", []byte("x")),
		"empty payload": message.NewMessage("uuid-2", nil),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			wantKey, wantValue, wantHeaders := theirs(t, msg)
			got, gotHeaders := ours(t, msg)
			require.Equal(t, "orders", got.Topic)
			require.Equal(t, wantKey, got.Key)
			require.Equal(t, wantValue, got.Value)
			require.Equal(t, wantHeaders, gotHeaders)
			require.Len(t, got.Headers, len(wantHeaders))
		})
	}
}

func TestNewRecordHeadersDoNotShareBytes(t *testing.T) {
	t.Parallel()
	got, before := ours(t, forwardedMessage())
	key := string(got.Key)
	// A user of the record appending to one header value must change
	// neither the next one nor the key.
	for _, h := range got.Headers {
		_ = append(h.Value, '!')
	}
	require.Equal(t, before, recordHeaders(t, got))
	require.Equal(t, key, string(got.Key))
}

func TestNewRecordRejectsTheReservedKey(t *testing.T) {
	t.Parallel()
	msg := forwardedMessage()
	msg.Metadata.Set(uuidHeaderKey, "spoofed")
	_, err := newRecord("orders", msg)
	require.ErrorContains(t, err, uuidHeaderKey)
	require.True(t, outbox.IsPermanent(err), "sending it again cannot help: DEAD at once")
}

// BenchmarkMarshal builds the record of an outbox event. The interop
// module's BenchmarkMarshal measures watermill-kafka's marshaler on the same
// message.
func BenchmarkMarshal(b *testing.B) {
	b.Run("kafkaforward", func(b *testing.B) {
		msg := forwardedMessage()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := newRecord("orders", msg); err != nil {
				b.Fatal(err)
			}
		}
	})
}
