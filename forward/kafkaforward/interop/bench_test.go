package interop_test

import (
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/wmoutbox/wmoutbox/forward/kafkaforward"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// BenchmarkPublish publishes from 256 goroutines at once, as the relay's
// workers do when forwarding a backlog, to a broker in this process
// (kfake), and reports the process's CPU time per record, broker included:
// kafkaforward against watermill-kafka's publisher (Sarama's synchronous
// producer) set up as durably (acks=all, idempotent, one request in flight
// per broker) and keyed the same way.
func BenchmarkPublish(b *testing.B) {
	for _, tc := range []struct {
		name string
		open func(brokers []string) (message.Publisher, error)
	}{
		{"watermill-kafka", func(brokers []string) (message.Publisher, error) {
			sc := kafka.DefaultSaramaSyncPublisherConfig()
			sc.Producer.RequiredAcks = sarama.WaitForAll
			sc.Producer.Idempotent = true
			sc.Net.MaxOpenRequests = 1
			sc.Version = sarama.V2_1_0_0
			return kafka.NewPublisher(kafka.PublisherConfig{
				Brokers:               brokers,
				Marshaler:             kafka.NewWithPartitioningMarshaler(kafkaforward.PartitionKey),
				OverwriteSaramaConfig: sc,
			}, watermill.NopLogger{})
		}},
		{"kafkaforward", func(brokers []string) (message.Publisher, error) {
			return kafkaforward.NewPublisher(brokers, kafkaforward.Config{})
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
			require.NoError(b, err)
			defer cluster.Close()
			pub, err := tc.open(cluster.ListenAddrs())
			require.NoError(b, err)
			defer pub.Close()
			// The topic, created on first use, is not what is measured.
			require.NoError(b, pub.Publish("orders", message.NewMessage(watermill.NewUUID(), nil)))
			b.SetParallelism(256 / runtime.GOMAXPROCS(0))
			b.ResetTimer()
			start := processCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				msg := message.NewMessage(watermill.NewUUID(), []byte(strings.Repeat(`{"order":"9f1c2e4a","total":"188.98"}`, 8)))
				msg.Metadata.Set(watermilladapter.MetadataEventType, "OrderCreated")
				msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
				msg.Metadata.Set(watermilladapter.MetadataEventID, watermill.NewULID())
				for pb.Next() {
					msg.Metadata.Set(watermilladapter.MetadataAggregateID, watermill.NewShortUUID())
					if err := pub.Publish("orders", msg); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64((processCPU(b)-start).Nanoseconds())/float64(b.N)/1e3, "cpu-µs/op")
		})
	}
}

// processCPU is the CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMarshal builds watermill-kafka's record of an outbox event, the
// message kafkaforward's BenchmarkMarshal builds its own record of.
func BenchmarkMarshal(b *testing.B) {
	b.Run("watermill-kafka", func(b *testing.B) {
		marshaler := kafka.NewWithPartitioningMarshaler(kafkaforward.PartitionKey)
		msg := forwardedMessage("6f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60")
		b.ReportAllocs()
		for b.Loop() {
			if _, err := marshaler.Marshal("orders", msg); err != nil {
				b.Fatal(err)
			}
		}
	})
}
