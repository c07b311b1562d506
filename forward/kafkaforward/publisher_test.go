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

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wmoutbox/wmoutbox/forward/kafkaforward"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// A relay that shuts down closes the publisher while handlers may still
// be publishing (a router whose CloseTimeout ran out): the publishes must
// fail with ErrClosed, not race with Close.
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
// stalled network, a broker stuck on its disk) holds a record for 20 s or
// more (TestPublishToAStalledBrokerFails). Publish must give up sooner when
// the message's context ends, as the outbox subscriber ends it when it
// gives up on the delivery at Close, and not hold the handler and the
// router for that long.
func TestPublishStopsWhenMessageContextEnds(t *testing.T) {
	t.Parallel()
	const topic = "stalled"
	pub, stalled := stalledPublisher(t, topic)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	published := publishAsync(ctx, pub, topic)
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

	// Close waits for the send Publish gave up on, up to
	// DefaultDeliveryTimeout while the broker stalls. A Publish meanwhile
	// fails at once.
	closed := make(chan error, 1)
	go func() { closed <- pub.Close() }()
	relaytest.Eventually(t, "Publish refused once Close began", func() bool {
		// Before Close begins, the record stalls with the others.
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		select {
		case err := <-publishAsync(ctx, pub, topic):
			return errors.Is(err, kafkaforward.ErrClosed)
		case <-time.After(time.Second):
			t.Fatal("a Publish outlived its context by a second, waiting for Close")
			return false
		}
	})
	again := make(chan error, 1)
	go func() { again <- pub.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the stalled send was settled", err)
	case err := <-again:
		t.Fatalf("a second Close returned (%v) before the first", err)
	case <-time.After(50 * time.Millisecond):
	}
	for _, done := range []chan error{closed, again} {
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(kafkaforward.DefaultDeliveryTimeout + relaytest.WaitLimit):
			t.Fatal("Close waited for the stalled broker past DefaultDeliveryTimeout")
		}
	}
}

// stalledPublisher returns a publisher on a one-partition topic whose
// broker, after one record, takes every produce request and never answers
// (a broker stuck on its disk), and a channel closed at the first request
// it holds.
func stalledPublisher(t *testing.T, topic string, opts ...kgo.Opt) (*kafkaforward.Publisher, <-chan struct{}) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	pub, err := kafkaforward.NewPublisher(cluster.ListenAddrs(), kafkaforward.Config{Options: opts})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	require.NoError(t, pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("before"))))
	stalled := make(chan struct{})
	var once sync.Once
	cluster.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		once.Do(func() { close(stalled) })
		return nil, nil, true // no answer
	})
	return pub, stalled
}

// publishAsync publishes a message with ctx as its context and returns
// where Publish's answer arrives.
func publishAsync(ctx context.Context, pub *kafkaforward.Publisher, topic string) <-chan error {
	msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
	msg.SetContext(ctx)
	done := make(chan error, 1)
	go func() { done <- pub.Publish(topic, msg) }()
	return done
}

// The outbox message's context ends only when the subscriber gives up on
// the delivery, at Close: against a broker that never answers, each
// Publish must fail by itself, so that the event is retried with its
// error in last_error and the worker moves on, and not hold the worker
// until the broker answers.
func TestPublishToAStalledBrokerFails(t *testing.T) {
	t.Parallel()
	const topic = "stalled-broker"
	pub, stalled := stalledPublisher(t, topic)
	start := time.Now()
	sent := publishAsync(t.Context(), pub, topic)
	<-stalled
	queued := publishAsync(t.Context(), pub, topic) // behind the request in flight
	for name, done := range map[string]<-chan error{"sent": sent, "queued": queued} {
		select {
		case err := <-done:
			require.Error(t, err, name)
			require.NotErrorIs(t, err, context.Canceled, name)
			t.Logf("%s record failed after %v: %v", name, time.Since(start).Round(time.Second), err)
		case <-time.After(kafkaforward.DefaultDeliveryTimeout + 2*relaytest.WaitLimit):
			t.Fatalf("the %s record's Publish still waits for a broker that never answers", name)
		}
	}
}

// With franz-go's buffer full (kgo.MaxBufferedRecords here, a stalled
// broker behind it), Produce waits for room: Publish must still stop
// waiting when its message's context ends.
func TestPublishWaitingForRoomStopsWhenMessageContextEnds(t *testing.T) {
	t.Parallel()
	const topic = "full-buffer"
	pub, stalled := stalledPublisher(t, topic, kgo.MaxBufferedRecords(1))
	ctx, cancel := context.WithCancel(t.Context())
	first := publishAsync(ctx, pub, topic)
	<-stalled
	cancel()
	require.ErrorIs(t, <-first, context.Canceled)

	ctx, cancel = context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	select {
	case err := <-publishAsync(ctx, pub, topic):
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(relaytest.WaitLimit):
		t.Fatal("Publish went on waiting for room after its message's context ended")
	}
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
// NewPublisher fail after its client connected. Nothing may stay
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
	require.ErrorIs(t, err, kerr.ClusterAuthorizationFailed)
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

// A topic the broker does not create on first use fails the publish with
// the broker's answer, after franz-go asked a few times, which is what the
// outbox records as the event's last error.
func TestMissingTopicFailsWithTheBrokersAnswer(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1)) // no topic is created on first use
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	pub, err := kafkaforward.NewPublisher(cluster.ListenAddrs(), kafkaforward.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })

	ctx, cancel := context.WithTimeout(t.Context(), relaytest.WaitLimit)
	defer cancel()
	msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
	msg.SetContext(ctx)
	err = pub.Publish("shop.Missing", msg)
	require.ErrorIs(t, err, kerr.UnknownTopicOrPartition)
	require.ErrorContains(t, err, "shop.Missing")
	require.False(t, outbox.IsPermanent(err), "the topic may be created: retried")
}

// partitionedHook calls fn with each record franz-go buffers into a
// partition, synchronously, inside the Produce call that buffers it.
type partitionedHook struct{ fn func(*kgo.Record) }

func (h partitionedHook) OnProduceRecordPartitioned(r *kgo.Record, _ int32) { h.fn(r) }

func uuidOf(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == uuidHeaderKey {
			return string(h.Value)
		}
	}
	return ""
}

// franz-go keeps the context Produce takes with the buffered record and
// fails every record buffered behind it in the partition once it ends. A
// message's context that ends after its record was buffered must fail no
// other message's publish. The hook ends M's context inside its Produce,
// the widest such window, while the broker holds an earlier request so
// that Y is buffered behind M.
func TestOneMessageContextEndingFailsNoOtherPublish(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)

	mUUID, yUUID := watermill.NewUUID(), watermill.NewUUID()
	mCtx, cancelM := context.WithCancel(t.Context())
	defer cancelM()
	yBuffered := make(chan struct{})
	hook := partitionedHook{func(r *kgo.Record) {
		switch uuidOf(r) {
		case mUUID:
			cancelM()
			// What the context's end sets off (context.AfterFunc) runs on
			// goroutines of its own: let it run before Produce returns.
			time.Sleep(200 * time.Millisecond)
		case yUUID:
			close(yBuffered)
		}
	}}
	pub, err := kafkaforward.NewPublisher(cluster.ListenAddrs(), kafkaforward.Config{Options: []kgo.Opt{kgo.WithHooks(hook)}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })

	// The broker holds the first produce request (X's) until released,
	// then answers it normally.
	held, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	cluster.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		if first.CompareAndSwap(false, true) {
			close(held)
			cluster.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	const topic = "orders"
	x := publishAsync(t.Context(), pub, topic)
	<-held

	m := message.NewMessage(mUUID, []byte("m"))
	m.SetContext(mCtx)
	require.ErrorIs(t, pub.Publish(topic, m), context.Canceled, "M's own context ended: its error is expected")

	y := make(chan error, 1)
	go func() { y <- pub.Publish(topic, message.NewMessage(yUUID, []byte("y"))) }()
	<-yBuffered
	close(release)
	require.NoError(t, <-x)
	select {
	case err := <-y:
		require.NoError(t, err, "Y's message context never ended; only M's did")
	case <-time.After(relaytest.WaitLimit):
		t.Fatal("Y's Publish did not return")
	}
}

// The same without hooks: publishes whose message contexts have short
// deadlines (a Timeout middleware, say) beside publishes whose contexts
// never end, on one partition. None of the latter may fail.
func TestShortMessageDeadlinesFailNoOtherPublish(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	pub, err := kafkaforward.NewPublisher(cluster.ListenAddrs(), kafkaforward.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	const topic = "orders"
	require.NoError(t, pub.Publish(topic, message.NewMessage(watermill.NewUUID(), nil)))

	ctx, stop := context.WithTimeout(t.Context(), 3*time.Second)
	defer stop()
	var succeeded atomic.Int64
	var spurious atomic.Pointer[error]
	const workers = 64
	done := make(chan struct{}, workers)
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; ctx.Err() == nil && spurious.Load() == nil; i++ {
				msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
				if w%2 == 0 {
					mctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%300)*time.Microsecond)
					msg.SetContext(mctx)
					_ = pub.Publish(topic, msg) // may fail: its deadline
					cancel()
					continue
				}
				if err := pub.Publish(topic, msg); err != nil {
					spurious.CompareAndSwap(nil, &err)
					return
				}
				succeeded.Add(1)
			}
		}()
	}
	for range workers {
		<-done
	}
	if errp := spurious.Load(); errp != nil {
		t.Fatalf("a Publish whose message context never ended failed (after %d successes): %v", succeeded.Load(), *errp)
	}
}
