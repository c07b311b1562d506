package kafkaforward

import (
	"testing"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

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

// encoded is what Sarama puts on the wire for a record's key, value and
// headers, with the headers by key (their order is the map's).
func encoded(t *testing.T, m *sarama.ProducerMessage) (key, value []byte, headers map[string]string) {
	t.Helper()
	var err error
	key, err = m.Key.Encode()
	require.NoError(t, err)
	value, err = m.Value.Encode()
	require.NoError(t, err)
	headers = make(map[string]string, len(m.Headers))
	for _, h := range m.Headers {
		require.NotContains(t, headers, string(h.Key), "one header per key")
		headers[string(h.Key)] = string(h.Value)
	}
	return key, value, headers
}

func TestRecordMarshalerBuildsWatermillKafkasRecord(t *testing.T) {
	t.Parallel()
	theirs := kafka.NewWithPartitioningMarshaler(PartitionKey)
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
			want, err := theirs.Marshal("orders", msg)
			require.NoError(t, err)
			got, err := recordMarshaler{}.Marshal("orders", msg)
			require.NoError(t, err)
			require.Equal(t, want.Topic, got.Topic)
			wantKey, wantValue, wantHeaders := encoded(t, want)
			gotKey, gotValue, gotHeaders := encoded(t, got)
			require.Equal(t, wantKey, gotKey)
			require.Equal(t, wantValue, gotValue)
			require.Equal(t, wantHeaders, gotHeaders)
			require.Len(t, got.Headers, len(want.Headers))
		})
	}
}

func TestRecordMarshalerHeadersDoNotShareBytes(t *testing.T) {
	t.Parallel()
	got, err := recordMarshaler{}.Marshal("orders", forwardedMessage())
	require.NoError(t, err)
	_, _, before := encoded(t, got)
	// A consumer of the record appending to one header must not change
	// the next one.
	for _, h := range got.Headers {
		_ = append(h.Key, '!')
		_ = append(h.Value, '!')
	}
	_, _, after := encoded(t, got)
	require.Equal(t, before, after)
}

func TestRecordMarshalerRejectsTheReservedKey(t *testing.T) {
	t.Parallel()
	msg := forwardedMessage()
	msg.Metadata.Set(kafka.UUIDHeaderKey, "spoofed")
	_, err := recordMarshaler{}.Marshal("orders", msg)
	require.ErrorContains(t, err, kafka.UUIDHeaderKey)
	require.True(t, outbox.IsPermanent(err), "sending it again cannot help: DEAD at once")
}

func BenchmarkMarshal(b *testing.B) {
	for name, m := range map[string]kafka.Marshaler{
		"watermill-kafka": kafka.NewWithPartitioningMarshaler(PartitionKey),
		"kafkaforward":    recordMarshaler{},
	} {
		b.Run(name, func(b *testing.B) {
			msg := forwardedMessage()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Marshal("orders", msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
