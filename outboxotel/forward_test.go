package outboxotel_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/wmoutbox/wmoutbox/forward"
	"github.com/wmoutbox/wmoutbox/forward/amqpforward"
	"github.com/wmoutbox/wmoutbox/forward/kafkaforward"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testamqp"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// recordHeaders reads a Kafka record's headers for a propagator: what a
// consumer downstream writes, with its Kafka client's headers.
type recordHeaders []kgo.RecordHeader

func (h recordHeaders) Get(key string) string {
	for _, kv := range h {
		if kv.Key == key {
			return string(kv.Value)
		}
	}
	return ""
}
func (recordHeaders) Set(string, string) {}
func (h recordHeaders) Keys() []string {
	keys := make([]string, len(h))
	for i, kv := range h {
		keys[i] = kv.Key
	}
	return keys
}

// consumeKafka reads one record of topic with franz-go alone.
func consumeKafka(t *testing.T, brokers []string, topic string) *kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), relaytest.WaitLimit)
	defer cancel()
	for {
		fetches := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "a record of %s in time", topic)
		require.NoError(t, fetches.Err())
		if recs := fetches.Records(); len(recs) > 0 {
			return recs[0]
		}
	}
}

// A franz-go consumer downstream of Kafka forwarding continues the
// writer's trace, as a child of the relay's process span.
func TestKafkaConsumerContinuesTrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	kafkaPub, err := kafkaforward.NewPublisher(cluster.ListenAddrs(), kafkaforward.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, kafkaPub.Close()) })
	toKafka, err := forward.Handler(forward.Config{Publisher: kafkaPub})
	require.NoError(t, err)
	r := b.startRelay(t, watermilladapter.SubscriberConfig{}, true, map[string]message.NoPublishHandlerFunc{"orders": toKafka})

	request := b.publish(t, r, "orders", message.NewMessage(watermill.NewUUID(), []byte(`{"id":1}`)))
	rec := consumeKafka(t, cluster.ListenAddrs(), "orders")
	far := trace.SpanContextFromContext(b.Config.Propagator.Extract(context.Background(), recordHeaders(rec.Headers)))

	process := b.waitSpans(t, "process orders", 1)[0]
	require.Equal(t, request.TraceID(), far.TraceID(), "the writer's trace id on the far side")
	require.Equal(t, process.SpanContext().SpanID(), far.SpanID(), "a child of the relay's process span")
}

// An amqp091 consumer downstream of RabbitMQ forwarding continues the
// writer's trace, as a child of the relay's process span.
func TestAMQPConsumerContinuesTrace(t *testing.T) {
	t.Parallel()
	url, conn := testamqp.Broker(t)
	b := setup(t)
	rnd := make([]byte, 6)
	_, _ = rand.Read(rnd)
	queue := "wmoutbox-otel-" + hex.EncodeToString(rnd)
	t.Cleanup(func() {
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer ch.Close()
		_, err = ch.QueueDelete(queue, false, false, false)
		require.NoError(t, err)
	})
	amqpPub, err := amqpforward.NewPublisher(url, amqpforward.Config{Queues: []string{queue}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, amqpPub.Close()) })
	toRabbit, err := forward.Handler(forward.Config{Publisher: amqpPub})
	require.NoError(t, err)
	r := b.startRelay(t, watermilladapter.SubscriberConfig{}, true, map[string]message.NoPublishHandlerFunc{queue: toRabbit})

	request := b.publish(t, r, queue, message.NewMessage(watermill.NewUUID(), []byte(`{"id":2}`)))

	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	require.NoError(t, err)
	var d amqp091.Delivery
	select {
	case d = <-deliveries:
		require.NoError(t, d.Ack(false))
	case <-time.After(relaytest.WaitLimit):
		t.Fatal("no delivery from RabbitMQ in time")
	}
	headers := propagation.MapCarrier{}
	for k, v := range d.Headers {
		if s, ok := v.(string); ok {
			headers[k] = s
		}
	}
	far := trace.SpanContextFromContext(b.Config.Propagator.Extract(context.Background(), headers))

	process := b.waitSpans(t, "process "+queue, 1)[0]
	require.Equal(t, request.TraceID(), far.TraceID(), "the writer's trace id on the far side")
	require.Equal(t, process.SpanContext().SpanID(), far.SpanID(), "a child of the relay's process span")
}
