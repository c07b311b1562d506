package amqpforward_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/forward/amqpforward"
	"github.com/wmoutbox/wmoutbox/internal/testamqp"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// BenchmarkPublish publishes one message per Publish, from 16 goroutines
// per CPU as a relay's workers do, to a durable queue; each Publish waits
// for the broker's confirm.
func BenchmarkPublish(b *testing.B) {
	url, conn := testamqp.Broker(b)
	queue := queueName(b, conn)
	pub, err := amqpforward.NewPublisher(url, amqpforward.Config{Queues: []string{queue}})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, pub.Close()) })
	payload := []byte(`{"order_id":"o-1","customer":"c-42","lines":[{"sku":"A-1","qty":2}],"total":"19.90"}`)
	var n atomic.Int64
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			msg := message.NewMessage(watermill.NewUUID(), payload)
			msg.Metadata.Set(watermilladapter.MetadataEventID, fmt.Sprint("evt-", i))
			msg.Metadata.Set(watermilladapter.MetadataEventType, "OrderCreated")
			msg.Metadata.Set(watermilladapter.MetadataAggregateID, fmt.Sprint("order-", i%100))
			if err := pub.Publish(queue, msg); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
