package forward_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/forward"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

const waitLimit = 10 * time.Second

// published is one Publish call seen by a recordingPublisher.
type published struct {
	topic string
	msg   *message.Message
}

// recordingPublisher is a downstream publisher that records what it is
// given, and fails with err when err is set.
type recordingPublisher struct {
	mu     sync.Mutex
	got    []published
	err    error
	closed int
}

func (p *recordingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	for _, m := range msgs {
		p.got = append(p.got, published{topic, m})
	}
	return nil
}

func (p *recordingPublisher) Close() error {
	p.mu.Lock()
	p.closed++
	p.mu.Unlock()
	return nil
}

func (p *recordingPublisher) closedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *recordingPublisher) published() []published {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]published(nil), p.got...)
}

// outboxMessage is a message as a watermilladapter.Subscriber delivers
// it: user headers plus the envelope and delivery keys.
func outboxMessage(payload []byte) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), payload)
	msg.Metadata.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	msg.Metadata.Set("x-user", "alice")
	msg.Metadata.Set(watermilladapter.MetadataEventID, "01JEVENT0000000000000000001")
	msg.Metadata.Set(watermilladapter.MetadataEventType, "OrderPlaced")
	msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
	msg.Metadata.Set(watermilladapter.MetadataAggregateID, "order-42")
	msg.Metadata.Set(watermilladapter.MetadataTenantID, "tenant-7")
	msg.Metadata.Set(watermilladapter.MetadataOccurredAt, "2026-01-02T03:04:05.123456789Z")
	msg.Metadata.Set(watermilladapter.MetadataAttempt, "3")
	msg.Metadata.Set(watermilladapter.MetadataSource, watermilladapter.SourceCold)
	return msg
}

// envelopeAndUserKeys are the keys every forwarded message keeps.
var envelopeAndUserKeys = []string{
	"traceparent", "x-user",
	watermilladapter.MetadataEventID, watermilladapter.MetadataEventType,
	watermilladapter.MetadataAggregateType, watermilladapter.MetadataAggregateID,
	watermilladapter.MetadataTenantID, watermilladapter.MetadataOccurredAt,
}

// runRouter runs handler on topic of a gochannel, the way a relay runs it
// on an outbox subscriber, and returns the channel to publish into.
func runRouter(t *testing.T, topic string, handler message.NoPublishHandlerFunc) *gochannel.GoChannel {
	t.Helper()
	upstream := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddConsumerHandler("forward", topic, upstream, handler)
	done := make(chan error, 1)
	go func() { done <- router.Run(context.Background()) }()
	t.Cleanup(func() {
		require.NoError(t, router.Close())
		require.NoError(t, <-done)
		require.NoError(t, upstream.Close())
	})
	select {
	case <-router.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	}
	return upstream
}

func TestHandlerForwardsToTheSubscribeTopicKeepingEverything(t *testing.T) {
	t.Parallel()
	downstream := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { require.NoError(t, downstream.Close()) })
	out, err := downstream.Subscribe(t.Context(), "orders")
	require.NoError(t, err)

	fwd, err := forward.Handler(forward.Config{Publisher: downstream})
	require.NoError(t, err)
	upstream := runRouter(t, "orders", fwd)

	payload := []byte("{\"id\":  42,\n \"bytes\": \"\x00\xff\"}") // not normalised JSON, not UTF-8
	sent := outboxMessage(payload)
	require.NoError(t, upstream.Publish("orders", sent))

	var got *message.Message
	select {
	case got = <-out:
		got.Ack()
	case <-time.After(waitLimit):
		t.Fatal("nothing forwarded")
	}
	require.Equal(t, sent.UUID, got.UUID)
	require.Equal(t, payload, []byte(got.Payload), "payload byte for byte")
	for _, k := range envelopeAndUserKeys {
		require.Equal(t, sent.Metadata.Get(k), got.Metadata.Get(k), "metadata %s", k)
	}
	_, hasAttempt := got.Metadata[watermilladapter.MetadataAttempt]
	_, hasSource := got.Metadata[watermilladapter.MetadataSource]
	require.False(t, hasAttempt || hasSource, "delivery-only keys are not forwarded: %v", got.Metadata)
	require.Len(t, got.Metadata, len(envelopeAndUserKeys))
}

func TestHandlerTopicMapping(t *testing.T) {
	t.Parallel()
	pub := &recordingPublisher{}
	fwd, err := forward.Handler(forward.Config{Publisher: pub, Topic: forward.ByAggregateType("events.")})
	require.NoError(t, err)

	order := outboxMessage([]byte("o"))
	global := outboxMessage([]byte("g"))
	global.Metadata.Set(watermilladapter.MetadataAggregateType, string(outbox.GlobalAggregate))
	require.NoError(t, fwd(order))
	require.NoError(t, fwd(global))

	got := pub.published()
	require.Len(t, got, 2)
	require.Equal(t, "events.Order", got[0].topic)
	require.Equal(t, "events.__GLOBAL__", got[1].topic)

	foreign := message.NewMessage(watermill.NewUUID(), []byte("x")) // not from an outbox subscriber
	require.ErrorIs(t, fwd(foreign), forward.ErrNoTopic)
	require.Len(t, pub.published(), 2, "nothing published without a topic")
}

func TestHandlerTopicFunctionErrorKeepsItsClass(t *testing.T) {
	t.Parallel()
	fwd, err := forward.Handler(forward.Config{
		Publisher: &recordingPublisher{},
		Topic: func(*message.Message) (string, error) {
			return "", outbox.Permanent(errors.New("no route for this event type"))
		},
	})
	require.NoError(t, err)
	err = fwd(outboxMessage([]byte("x")))
	require.True(t, outbox.IsPermanent(err), "a Permanent error stays Permanent through the handler: %v", err)
	require.ErrorContains(t, err, "01JEVENT0000000000000000001")
}

func TestHandlerOutsideRouterHasNoDefaultTopic(t *testing.T) {
	t.Parallel()
	pub := &recordingPublisher{}
	fwd, err := forward.Handler(forward.Config{Publisher: pub})
	require.NoError(t, err)
	require.ErrorIs(t, fwd(outboxMessage([]byte("x"))), forward.ErrNoTopic)
	require.Empty(t, pub.published())
}

func TestHandlerReturnsThePublishError(t *testing.T) {
	t.Parallel()
	refused := errors.New("dial tcp 127.0.0.1:9092: connect: connection refused")
	pub := &recordingPublisher{err: refused}
	fwd, err := forward.Handler(forward.Config{Publisher: pub, Topic: func(*message.Message) (string, error) { return "orders", nil }})
	require.NoError(t, err)
	err = fwd(outboxMessage([]byte("x")))
	require.ErrorIs(t, err, refused)
	require.EqualError(t, err, "forward: publish event 01JEVENT0000000000000000001 to orders: "+refused.Error())
}

func TestHandlerNeedsAPublisher(t *testing.T) {
	t.Parallel()
	_, err := forward.Handler(forward.Config{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	var noPublisher *gochannel.GoChannel
	_, err = forward.Handler(forward.Config{Publisher: noPublisher})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest, "a typed nil is no publisher either")
}

func TestDownstreamKeepsContextAndDoesNotTouchTheOriginal(t *testing.T) {
	t.Parallel()
	type key struct{}
	msg := outboxMessage([]byte("x"))
	msg.SetContext(context.WithValue(t.Context(), key{}, "v"))
	out := forward.Downstream(msg)
	require.Equal(t, "v", out.Context().Value(key{}))
	out.Metadata.Set("x-user", "bob")
	require.Equal(t, "alice", msg.Metadata.Get("x-user"))
	require.Equal(t, "3", msg.Metadata.Get(watermilladapter.MetadataAttempt), "the delivered message keeps its delivery keys")
}

func TestLazyConnectsOnFirstUseAndRetriesAFailedConnect(t *testing.T) {
	t.Parallel()
	down := &recordingPublisher{}
	refused := errors.New("connection refused")
	var (
		mu       sync.Mutex
		connects int
	)
	lazy := forward.Lazy(func() (message.Publisher, error) {
		mu.Lock()
		defer mu.Unlock()
		connects++
		if connects == 1 {
			return nil, refused
		}
		return down, nil
	})
	mu.Lock()
	require.Zero(t, connects, "nothing dialled before the first Publish")
	mu.Unlock()

	err := lazy.Publish("orders", outboxMessage([]byte("1")))
	require.ErrorIs(t, err, refused)
	require.ErrorContains(t, err, "forward: connect downstream publisher")

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { require.NoError(t, lazy.Publish("orders", outboxMessage([]byte("2")))) })
	}
	wg.Wait()
	mu.Lock()
	require.Equal(t, 2, connects, "one more connect, shared by every later Publish")
	mu.Unlock()
	require.Len(t, down.published(), 8)

	require.NoError(t, lazy.Close())
	require.NoError(t, lazy.Close())
	require.Equal(t, 1, down.closed, "the downstream publisher is closed once")
	require.ErrorIs(t, lazy.Publish("orders", outboxMessage([]byte("3"))), forward.ErrPublisherClosed)
}

// blockingPublisher holds each Publish until release is closed, and
// records whether it was closed while one ran.
type blockingPublisher struct {
	entered, release chan struct{}
	mu               sync.Mutex
	running          int
	closedWhileBusy  bool
}

func (p *blockingPublisher) Publish(string, ...*message.Message) error {
	p.mu.Lock()
	p.running++
	p.mu.Unlock()
	p.entered <- struct{}{}
	<-p.release
	p.mu.Lock()
	p.running--
	p.mu.Unlock()
	return nil
}

func (p *blockingPublisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closedWhileBusy = p.running > 0
	return nil
}

// closeDuringPublish starts a Publish through Lazy that the downstream
// publisher holds until down.release is closed, then a Close, and returns
// what each will return.
func closeDuringPublish() (lazy *forward.LazyPublisher, down *blockingPublisher, published, closed <-chan error) {
	down = &blockingPublisher{entered: make(chan struct{}), release: make(chan struct{})}
	lazy = forward.Lazy(func() (message.Publisher, error) { return down, nil })
	publishing := make(chan error, 1)
	go func() { publishing <- lazy.Publish("orders", outboxMessage([]byte("1"))) }()
	<-down.entered
	closing := make(chan error, 1)
	go func() { closing <- lazy.Close() }()
	return lazy, down, publishing, closing
}

// Close waits for the publishes in flight: downstream publishers (such as
// watermill-kafka's) are not safe to close under a running Publish.
func TestLazyCloseWaitsForPublishesInFlight(t *testing.T) {
	t.Parallel()
	lazy, down, published, closed := closeDuringPublish()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a Publish was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(down.release)
	require.NoError(t, <-published)
	require.NoError(t, <-closed)
	require.False(t, down.closedWhileBusy)
	require.ErrorIs(t, lazy.Publish("orders", outboxMessage([]byte("2"))), forward.ErrPublisherClosed)
}

// A downstream Close can take a broker's timeouts; a Publish meanwhile
// (a handler still running after the router gave up on it) fails at once.
func TestLazyPublishDuringASlowCloseFailsAtOnce(t *testing.T) {
	t.Parallel()
	down := &slowClosePublisher{closing: make(chan struct{}), release: make(chan struct{})}
	lazy := forward.Lazy(func() (message.Publisher, error) { return down, nil })
	require.NoError(t, lazy.Publish("orders", outboxMessage([]byte("1"))))
	closed := make(chan error, 1)
	go func() { closed <- lazy.Close() }()
	<-down.closing
	published := make(chan error, 1)
	go func() { published <- lazy.Publish("orders", outboxMessage([]byte("2"))) }()
	select {
	case err := <-published:
		require.ErrorIs(t, err, forward.ErrPublisherClosed)
	case <-time.After(waitLimit):
		t.Fatal("a Publish waited for the downstream Close")
	}
	again := make(chan error, 1)
	go func() { again <- lazy.Close() }()
	select {
	case err := <-again:
		t.Fatalf("a second Close returned (%v) before the downstream was closed", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(down.release)
	require.NoError(t, <-closed)
	require.NoError(t, <-again)
}

// A connect that returns after Close has its publisher closed, also
// without holding Publish up meanwhile.
func TestLazyPublishWhileALateConnectIsClosedFailsAtOnce(t *testing.T) {
	t.Parallel()
	down := &slowClosePublisher{closing: make(chan struct{}), release: make(chan struct{})}
	connected := make(chan struct{})
	lazy := forward.Lazy(func() (message.Publisher, error) { <-connected; return down, nil })
	msg := outboxMessage([]byte("1"))
	ctx, cancel := context.WithCancel(t.Context())
	msg.SetContext(ctx)
	published := make(chan error, 1)
	go func() { published <- lazy.Publish("orders", msg) }() // starts the connect
	cancel()
	require.ErrorIs(t, <-published, context.Canceled)
	require.NoError(t, lazy.Close())
	close(connected)
	<-down.closing
	go func() { published <- lazy.Publish("orders", outboxMessage([]byte("2"))) }()
	select {
	case err := <-published:
		require.ErrorIs(t, err, forward.ErrPublisherClosed)
	case <-time.After(waitLimit):
		t.Fatal("a Publish waited for the late publisher's Close")
	}
	close(down.release)
}

// slowClosePublisher's Close says it began, then waits for release.
type slowClosePublisher struct {
	recordingPublisher
	closing, release chan struct{}
}

func (p *slowClosePublisher) Close() error {
	close(p.closing)
	<-p.release
	return nil
}

// A connect that hangs (a broker host that drops packets: a dial timeout
// for each metadata retry) must not hold a delivery past its message's
// context, nor Close; the publisher it builds at last is closed.
func TestLazyConnectDoesNotHoldPublishOrClose(t *testing.T) {
	t.Parallel()
	down := &recordingPublisher{}
	connecting, release := make(chan struct{}, 8), make(chan struct{})
	var connects atomic.Int32
	lazy := forward.Lazy(func() (message.Publisher, error) {
		connects.Add(1)
		connecting <- struct{}{}
		<-release
		return down, nil
	})

	ctx, cancel := context.WithCancel(t.Context())
	const publishers = 4
	published := make(chan error, publishers)
	for range publishers {
		go func() {
			msg := outboxMessage([]byte("1"))
			msg.SetContext(ctx)
			published <- lazy.Publish("orders", msg)
		}()
	}
	<-connecting
	cancel()
	for range publishers {
		select {
		case err := <-published:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(waitLimit):
			t.Fatal("Publish waited for the connect after its message's context ended")
		}
	}
	require.EqualValues(t, 1, connects.Load(), "the publishes waited for one connect")

	closed := make(chan error, 1)
	go func() { closed <- lazy.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(waitLimit):
		t.Fatal("Close waited for the connect")
	}
	close(release)
	require.Eventually(t, func() bool { return down.closedCount() == 1 }, waitLimit, time.Millisecond,
		"the publisher the late connect built is closed")
	require.Empty(t, down.published())
	require.ErrorIs(t, lazy.Publish("orders", outboxMessage([]byte("2"))), forward.ErrPublisherClosed)
}

// While Close waits for a publish in flight (a downstream broker that
// does not answer, a message whose context has not ended yet), a Publish
// that arrives (a handler still running during shutdown) fails at once
// with ErrPublisherClosed, as it does while the downstream Close runs.
func TestLazyPublishWhileCloseWaitsFailsAtOnce(t *testing.T) {
	t.Parallel()
	lazy, down, inFlight, closed := closeDuringPublish()
	time.Sleep(50 * time.Millisecond) // Close waits for the publish in flight

	msg := outboxMessage([]byte("2"))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	msg.SetContext(ctx)
	published := make(chan error, 1)
	go func() { published <- lazy.Publish("orders", msg) }()
	select {
	case err := <-published:
		require.ErrorIs(t, err, forward.ErrPublisherClosed)
	case <-time.After(2 * time.Second):
		close(down.release)
		t.Errorf("a Publish waited 2 s (its context ended after 200 ms) for Close to get the lock; "+
			"once the publish in flight returned, it returned %v", <-published)
	}
	select {
	case <-down.release:
	default:
		close(down.release)
	}
	require.NoError(t, <-inFlight)
	require.NoError(t, <-closed)
}
