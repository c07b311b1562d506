package kafkaforward_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wmoutbox/wmoutbox/forward/kafkaforward"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
)

// A relay that shuts down closes the publisher while handlers may still
// be publishing (a router whose CloseTimeout ran out): the publishes must
// fail with ErrClosed, not race with Close nor panic in Sarama.
func TestCloseDuringPublish(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t)
	pub, err := kafkaforward.NewPublisher(brokers, kafkaforward.Config{})
	require.NoError(t, err)

	const publishers = 4
	var started sync.WaitGroup
	started.Add(publishers)
	errs := make(chan error, publishers)
	for range publishers {
		go func() {
			for i := 0; ; i++ {
				err := pub.Publish("close-during-publish", message.NewMessage(watermill.NewUUID(), []byte("x")))
				if i == 0 {
					started.Done()
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	started.Wait()
	require.NoError(t, pub.Close())
	for range publishers {
		select {
		case err := <-errs:
			require.ErrorIs(t, err, kafkaforward.ErrClosed)
		case <-time.After(relaytest.WaitLimit):
			t.Fatal("a Publish did not return after Close")
		}
	}
	require.NoError(t, pub.Close(), "Close is idempotent")
}

// A broker that takes the connection but never answers a produce (a
// stalled network, a broker stuck on its disk) holds a Sarama send for
// Net.ReadTimeout on every retry. Publish must give up when the message's
// context ends, as the outbox subscriber ends it when it gives up on the
// delivery at Close, and not hold the handler and the router for that long.
func TestPublishStopsWhenMessageContextEnds(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	require.NoError(t, err)
	defer cluster.Close()
	sc := kafkaforward.SaramaConfig()
	sc.Net.ReadTimeout = time.Hour // Sarama alone waits this long
	pub, err := kafkaforward.NewPublisher(cluster.ListenAddrs(), kafkaforward.Config{Sarama: sc})
	require.NoError(t, err)
	const topic = "stalled"
	require.NoError(t, pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("before"))))

	stalled := make(chan struct{})
	var once sync.Once
	cluster.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		once.Do(func() { close(stalled) })
		return nil, nil, true // no answer
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	msg := message.NewMessage(watermill.NewUUID(), []byte("stalled"))
	msg.SetContext(ctx)
	published := make(chan error, 1)
	go func() { published <- pub.Publish(topic, msg) }()
	select {
	case <-stalled:
	case <-time.After(relaytest.WaitLimit):
		t.Fatal("the produce request did not reach the broker")
	}
	cancel()
	select {
	case err := <-published:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(relaytest.WaitLimit):
		t.Fatal("Publish went on waiting for Kafka after its message's context ended")
	}

	// The send Publish gave up on ends when the broker goes away; Close
	// waits for it.
	cluster.Close()
	require.NoError(t, pub.Close())
}
