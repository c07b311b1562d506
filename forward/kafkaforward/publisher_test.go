package kafkaforward_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/eapache/go-resiliency/breaker"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wmoutbox/wmoutbox/forward/kafkaforward"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/outbox"
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

	// Close waits for the send Publish gave up on, which ends when the
	// broker goes away. A Publish meanwhile fails at once.
	closed := make(chan error, 1)
	go func() { closed <- pub.Close() }()
	relaytest.Eventually(t, "Publish refused once Close began", func() bool {
		// Before Close begins, the record stalls with the others.
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		late := message.NewMessage(watermill.NewUUID(), []byte("late"))
		late.SetContext(ctx)
		published := make(chan error, 1)
		go func() { published <- pub.Publish(topic, late) }()
		select {
		case err := <-published:
			return errors.Is(err, kafkaforward.ErrClosed)
		case <-time.After(time.Second):
			t.Fatal("a Publish outlived its context by a second, waiting for Close")
			return false
		}
	})
	again := make(chan error, 1)
	go func() { again <- pub.Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned before Sarama settled the stalled send")
	case <-again:
		t.Fatal("a second Close returned before the first")
	case <-time.After(50 * time.Millisecond):
	}
	cluster.Close()
	require.NoError(t, <-closed)
	require.NoError(t, <-again)
}

// countingListener counts the connections it accepted, and those still
// open on the broker's side.
type countingListener struct {
	net.Listener
	accepted, open *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.accepted.Add(1)
	l.open.Add(1)
	return &countedConn{Conn: c, open: l.open}, nil
}

type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

// A broker that refuses the idempotent producer its id (Kafka before 2.8
// without the IdempotentWrite ACL, a coordinator still loading) makes
// NewPublisher fail after Sarama's client connected. Nothing may stay
// connected: behind forward.Lazy the connect is tried again for every
// event, and each failure would keep a client, its connections and its
// goroutines.
func TestNewPublisherFailingAfterConnectLeavesNothingOpen(t *testing.T) {
	t.Parallel()
	var accepted, open atomic.Int64
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(),
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			l, err := net.Listen(network, address)
			if err != nil {
				return nil, err
			}
			return countingListener{Listener: l, accepted: &accepted, open: &open}, nil
		}))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	cluster.ControlKey(kmsg.InitProducerID.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		resp := req.(*kmsg.InitProducerIDRequest).ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil, true
	})

	_, err = kafkaforward.NewPublisher(cluster.ListenAddrs(), kafkaforward.Config{})
	require.ErrorIs(t, err, sarama.ErrClusterAuthorizationFailed)
	// Counted when accepted: by now the broker may have seen them closed.
	require.Positive(t, accepted.Load(), "NewPublisher connected before it failed")
	relaytest.Eventually(t, "the failed publisher's connections closed", func() bool { return open.Load() == 0 })
}

// A topic name Kafka can never accept (ByAggregateType on an aggregate
// type with a space, say) is no outage: retrying cannot fix it, and the
// event goes DEAD at once instead of after its attempts. kfake creates
// such topics where a broker answers INVALID_TOPIC_EXCEPTION, so the
// publisher must refuse them itself.
func TestInvalidTopicIsPermanent(t *testing.T) {
	t.Parallel()
	pub, err := kafkaforward.NewPublisher(newCluster(t), kafkaforward.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	for _, topic := range []string{"shop.Order Line", "shop/Order", "..", strings.Repeat("t", 250), ""} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
		msg.SetContext(ctx)
		err := pub.Publish(topic, msg)
		cancel()
		require.Error(t, err, "topic %q", topic)
		require.True(t, outbox.IsPermanent(err), "topic %q: %v", topic, err)
	}
	require.NoError(t, pub.Publish("shop.Order_Line-v2", message.NewMessage(watermill.NewUUID(), []byte("x"))))
}

// Once Sarama's circuit breaker stops producing to a topic that keeps
// failing, every record fails with "circuit breaker is open" alone, which
// is what the outbox records as the events' last error; the publisher adds
// the failure behind it, here a topic the broker does not create.
func TestBreakerRefusalCarriesTheFailureBehindIt(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1)) // no topic is created on first use
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	pub, err := kafkaforward.NewPublisher(cluster.ListenAddrs(), kafkaforward.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })

	var last error
	for range 10 {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
		msg.SetContext(ctx)
		last = pub.Publish("shop.Missing", msg)
		cancel()
		require.Error(t, last)
		if errors.Is(last, breaker.ErrBreakerOpen) {
			break
		}
	}
	require.ErrorIs(t, last, breaker.ErrBreakerOpen, "the breaker opened")
	require.ErrorIs(t, last, sarama.ErrUnknownTopicOrPartition, "the failure behind it")
}
