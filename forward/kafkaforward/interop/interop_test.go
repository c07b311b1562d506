package interop_test

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmoutbox/wmoutbox/forward/kafkaforward"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// waitLimit bounds every wait for the broker.
const waitLimit = 20 * time.Second

// newPublisher starts an in-process Kafka broker (kfake) and returns its
// addresses and a kafkaforward publisher on it.
func newPublisher(t *testing.T) ([]string, *kafkaforward.Publisher) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()
	pub, err := kafkaforward.NewPublisher(brokers, kafkaforward.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	return brokers, pub
}

// forwardedMessage is an outbox event as the forward handler publishes it.
func forwardedMessage(uuid string) *message.Message {
	msg := message.NewMessage(uuid, []byte(`{"orderId":"9f1c2e4a","total":"188.98"}`))
	msg.Metadata.Set(watermilladapter.MetadataEventID, "01KAQ7Z4V5J8M2N6P9R3T7W1XY")
	msg.Metadata.Set(watermilladapter.MetadataEventType, "OrderCreated")
	msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
	msg.Metadata.Set(watermilladapter.MetadataAggregateID, "9f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60")
	msg.Metadata.Set(watermilladapter.MetadataOccurredAt, "2026-11-23T16:35:53.123456Z")
	msg.Metadata.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	msg.Metadata.Set("empty", "")
	return msg
}

// messages are the kinds of message a relay forwards, each with a UUID of
// its own.
func messages() map[string]*message.Message {
	noAggregate := forwardedMessage("6f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f61")
	delete(noAggregate.Metadata, watermilladapter.MetadataAggregateID)
	return map[string]*message.Message{
		"outbox event":  forwardedMessage("6f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60"),
		"no aggregate":  noAggregate,
		"not an outbox": message.NewMessage("uuid-1", []byte("x")),
		"empty payload": message.NewMessage("uuid-2", nil),
	}
}

// consume reads n records of topic from the beginning with franz-go's
// consumer, and returns them by the value of their
// watermill-kafka UUID header.
func consume(t *testing.T, brokers []string, topic string, n int) map[string]*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond),
	)
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	recs := map[string]*kgo.Record{}
	for len(recs) < n {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s in time", len(recs), n, topic)
		}
		require.NoError(t, fetches.Err())
		fetches.EachRecord(func(r *kgo.Record) {
			uuid, ok := header(r, kafka.UUIDHeaderKey)
			require.True(t, ok, "record without %s: %v", kafka.UUIDHeaderKey, r.Headers)
			recs[uuid] = r
		})
	}
	return recs
}

// header is the value of the record's header key, and whether it has one.
func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// The record kafkaforward produces is the record watermill-kafka's
// publisher produces with kafkaforward.PartitionKey: the same key, value
// and headers, the UUID under kafka.UUIDHeaderKey.
func TestRecordsAreWatermillKafkas(t *testing.T) {
	t.Parallel()
	brokers, pub := newPublisher(t)
	const topic = "orders"
	sent := messages()
	for _, msg := range sent {
		require.NoError(t, pub.Publish(topic, msg))
	}
	got := consume(t, brokers, topic, len(sent))
	marshaler := kafka.NewWithPartitioningMarshaler(kafkaforward.PartitionKey)
	for name, msg := range sent {
		t.Run(name, func(t *testing.T) {
			rec, ok := got[msg.UUID]
			require.True(t, ok, "no record has the message UUID under %s", kafka.UUIDHeaderKey)
			want, err := marshaler.Marshal(topic, msg)
			require.NoError(t, err)
			key, err := want.Key.Encode()
			require.NoError(t, err)
			value, err := want.Value.Encode()
			require.NoError(t, err)
			require.Equal(t, key, rec.Key)
			require.Equal(t, value, rec.Value)
			wantHeaders := map[string]string{}
			for _, h := range want.Headers {
				wantHeaders[string(h.Key)] = string(h.Value)
			}
			gotHeaders := map[string]string{}
			for _, h := range rec.Headers {
				require.NotContains(t, gotHeaders, h.Key, "one header per key")
				gotHeaders[h.Key] = string(h.Value)
			}
			require.Equal(t, wantHeaders, gotHeaders)
		})
	}
}

// watermill-kafka's subscriber reads what kafkaforward produced as the
// message that was published: UUID, payload and metadata, keyed by the
// partition key.
func TestWatermillKafkaSubscriberReadsTheRecords(t *testing.T) {
	t.Parallel()
	brokers, pub := newPublisher(t)
	const topic = "orders"
	sent := messages()
	for _, msg := range sent {
		require.NoError(t, pub.Publish(topic, msg))
	}

	sc := kafka.DefaultSaramaSubscriberConfig()
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers:               brokers,
		Unmarshaler:           kafka.NewWithPartitioningMarshaler(kafkaforward.PartitionKey),
		OverwriteSaramaConfig: sc,
	}, watermill.NopLogger{})
	require.NoError(t, err)
	defer func() { require.NoError(t, sub.Close()) }()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	received, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)

	byUUID := map[string]*message.Message{}
	for _, msg := range sent {
		byUUID[msg.UUID] = msg
	}
	for range sent {
		var got *message.Message
		select {
		case got = <-received:
		case <-ctx.Done():
			t.Fatalf("watermill-kafka's subscriber read %d of %d messages in time", len(sent)-len(byUUID), len(sent))
		}
		got.Ack()
		want, ok := byUUID[got.UUID]
		require.True(t, ok, "a message with an unknown or repeated UUID %q", got.UUID)
		delete(byUUID, got.UUID)
		require.Equal(t, string(want.Payload), string(got.Payload))
		require.Equal(t, want.Metadata, got.Metadata)
		wantKey, err := kafkaforward.PartitionKey(topic, want)
		require.NoError(t, err)
		key, ok := kafka.MessageKeyFromCtx(got.Context())
		require.True(t, ok)
		require.Equal(t, wantKey, string(key))
	}
}

// The metadata key kafkaforward keeps for the UUID is watermill-kafka's
// kafka.UUIDHeaderKey: a message that sets it fails at once, as
// watermill-kafka's marshaler fails it, and for good (outbox.Permanent).
func TestUUIDHeaderKeyIsReserved(t *testing.T) {
	t.Parallel()
	_, pub := newPublisher(t)
	msg := forwardedMessage(watermill.NewUUID())
	msg.Metadata.Set(kafka.UUIDHeaderKey, "spoofed")
	_, theirs := kafka.NewWithPartitioningMarshaler(kafkaforward.PartitionKey).Marshal("orders", msg)
	require.Error(t, theirs)
	err := pub.Publish("orders", msg)
	require.ErrorContains(t, err, kafka.UUIDHeaderKey)
	require.True(t, outbox.IsPermanent(err), "sending it again cannot help: DEAD at once")
}
