package kafkaforward_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

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
