package outboxotel_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/wmoutbox/wmoutbox/forward"
	"github.com/wmoutbox/wmoutbox/forward/kafkaforward"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// TestTraceTree prints the trace of one event, from the request that
// writes it through the relay and Kafka forwarding to a franz-go consumer
// downstream that continues it from the record's headers, as a tree (go
// test -v -run TestTraceTree shows it), and checks its shape.
func TestTraceTree(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	kafkaPub, err := kafkaforward.NewPublisher(cluster.ListenAddrs(), kafkaforward.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, kafkaPub.Close()) })
	toKafka, err := forward.Handler(forward.Config{Publisher: kafkaPub, Topic: forward.ByAggregateType("shop.")})
	require.NoError(t, err)
	r := b.startRelay(t, watermilladapter.SubscriberConfig{}, true, map[string]message.NoPublishHandlerFunc{"orders": toKafka})

	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"id":42}`))
	msg.Metadata.Set(watermilladapter.MetadataEventType, "OrderCreated")
	msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
	msg.Metadata.Set(watermilladapter.MetadataAggregateID, "order-42")
	request := b.publish(t, r, "orders", msg)

	// The consumer downstream: franz-go, and the propagator on the
	// record's headers.
	rec := consumeKafka(t, cluster.ListenAddrs(), "shop.Order")
	ctx := b.Config.Propagator.Extract(context.Background(), recordHeaders(rec.Headers))
	_, span := b.Tracer.Start(ctx, "process shop.Order", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.system", "kafka"), attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", rec.Topic)))
	span.End()
	b.waitSpans(t, "process orders", 1)

	got := tree(b.Spans.Ended(), request.TraceID())
	t.Logf("the trace of one event:\n%s", got)
	require.Equal(t, `request [internal]
  create orders [producer] messaging.system=wmoutbox messaging.operation.type=create messaging.destination.name=orders
    process orders [consumer] messaging.system=wmoutbox messaging.operation.type=process messaging.destination.name=orders wmoutbox.attempt=1 wmoutbox.source=hot wmoutbox.outcome=done
      process shop.Order [consumer] messaging.system=kafka messaging.operation.type=process messaging.destination.name=shop.Order
`, got)
}
