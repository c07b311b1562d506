package amqpforward_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/forward/amqpforward"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testamqp"
)

// stallProxy forwards TCP to RabbitMQ; while paused it stops forwarding
// what the client sends (the broker's frames, heartbeats included, still
// reach the client), as a broker that stopped reading the socket does
// (connection.blocked under a memory or disk alarm, a stalled network).
type stallProxy struct {
	addr   string
	paused atomic.Bool
	ln     net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
	done   chan struct{}
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &stallProxy{addr: ln.Addr().String(), ln: ln, done: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Add(2)
			go p.pipe(s, c, true)
			go p.pipe(c, s, false)
		}
	}()
	t.Cleanup(func() {
		close(p.done)
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *stallProxy) pipe(dst, src net.Conn, pausable bool) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for pausable && p.paused.Load() {
			select {
			case <-p.done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func proxiedURL(url, addr string) string {
	return strings.Replace(url, "127.0.0.1:5672", addr, 1)
}

// proxiedPublisher is a publisher to a queue of the test's own, through
// a proxy the test can stall, that has published once.
func proxiedPublisher(t *testing.T, cfg amqpforward.Config) (*amqpforward.Publisher, *stallProxy, string) {
	t.Helper()
	url, conn := testamqp.Broker(t)
	proxy := newStallProxy(t, "127.0.0.1:5672")
	queue := queueName(t, conn)
	cfg.Queues = []string{queue}
	pub, err := amqpforward.NewPublisher(proxiedURL(url, proxy.addr), cfg)
	require.NoError(t, err)
	require.NoError(t, pub.Publish(queue, message.NewMessage(watermill.NewUUID(), []byte(`{}`))))
	return pub, proxy, queue
}

// publishWithDeadline publishes a message of payload whose context ends
// after 300 ms, and fails the test when Publish outlives it by seconds
// (the proxy then resumes, so that Publish returns).
func publishWithDeadline(t *testing.T, pub *amqpforward.Publisher, queue string, proxy *stallProxy, payload []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	msg := message.NewMessage(watermill.NewUUID(), payload)
	msg.SetContext(ctx)
	done := make(chan error, 1)
	go func() { done <- pub.Publish(queue, msg) }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(3 * time.Second):
		proxy.paused.Store(false)
		t.Errorf("Publish still blocked 3 s after its context ended; returned %v once the broker read again", <-done)
	}
}

// A message whose context ends while the broker does not read: Publish
// returns with the context's error (the outbox delivers the event again)
// and gives back its slot, instead of waiting for the channel's close.
func TestCancelledPublishReturnsWhileTheBrokerStalls(t *testing.T) {
	pub, proxy, queue := proxiedPublisher(t, amqpforward.Config{Channels: 1})
	proxy.paused.Store(true)
	publishWithDeadline(t, pub, queue, proxy, []byte(`{}`))
	proxy.paused.Store(false)
	require.NoError(t, pub.Publish(queue, message.NewMessage(watermill.NewUUID(), []byte(`{}`))), "the slot is free")
	require.NoError(t, pub.Close())
}

// A message that needs a channel of its own while the broker does not
// read (the only idle one is busy with a stalled publish): opening it and
// turning on confirms are requests the broker must answer, and Publish
// stops waiting for them when its context ends.
func TestCancelledPublishReturnsWhileAChannelOpenStalls(t *testing.T) {
	pub, proxy, queue := proxiedPublisher(t, amqpforward.Config{Channels: 2})
	proxy.paused.Store(true)
	first := make(chan error, 1)
	go func() { first <- pub.Publish(queue, message.NewMessage(watermill.NewUUID(), []byte(`{}`))) }()
	time.Sleep(100 * time.Millisecond) // the first publish holds the idle channel
	publishWithDeadline(t, pub, queue, proxy, []byte(`{}`))
	proxy.paused.Store(false)
	require.NoError(t, <-first)
	require.NoError(t, pub.Publish(queue, message.NewMessage(watermill.NewUUID(), []byte(`{}`))), "a slot is free")
	require.NoError(t, pub.Close())
}

// Close while the broker does not answer must not block the relay's
// shutdown forever.
func TestCloseReturnsWhileTheBrokerStalls(t *testing.T) {
	pub, proxy, _ := proxiedPublisher(t, amqpforward.Config{})
	proxy.paused.Store(true)
	done := make(chan error, 1)
	go func() { done <- pub.Close() }()
	select {
	case err := <-done:
		// Returning is what counts; the stalled connection may be an error.
		t.Logf("Close returned %v", err)
	// Close gives the broker closeTimeout (2 s) per connection; the bound
	// leaves room for a loaded machine and still tells a Close that
	// returns from one that waits for the broker.
	case <-time.After(15 * time.Second):
		proxy.paused.Store(false)
		t.Errorf("Close blocked over 15 s while the broker did not read; it returned %v once the broker read again", <-done)
	}
}

// A queue at its x-max-length with x-overflow=reject-publish: the broker
// nacks, and Publish must fail.
func TestRejectedPublishIsAnError(t *testing.T) {
	url, conn := testamqp.Broker(t)
	queue := queueName(t, conn)
	pub, err := amqpforward.NewPublisher(url, amqpforward.Config{
		Queues:         []string{queue},
		QueueArguments: amqp091.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"},
		Channels:       1,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	require.NoError(t, pub.Publish(queue, message.NewMessage(watermill.NewUUID(), []byte(`{}`))))
	for range 3 {
		err = pub.Publish(queue, message.NewMessage(watermill.NewUUID(), []byte(`{}`)))
		require.ErrorContains(t, err, "not confirmed by the broker")
		require.NotErrorIs(t, err, amqpforward.ErrUnroutable)
	}
}

// Publishes in flight when the connection closes fail, but never with
// ErrUnroutable: every message went to a queue that exists.
func TestCloseDuringPublishesIsNotUnroutable(t *testing.T) {
	url, conn := testamqp.Broker(t)
	queue := queueName(t, conn)
	// One P makes the window (ack handled, then the connection's shutdown
	// closes the returns channel before the publisher reads it) likely.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for round := range 40 {
		pub, err := amqpforward.NewPublisher(url, amqpforward.Config{Queues: []string{queue}, Channels: 32})
		require.NoError(t, err)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var unroutable []error
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					err := pub.Publish(queue, message.NewMessage(watermill.NewUUID(), []byte(`{}`)))
					if errors.Is(err, amqpforward.ErrUnroutable) {
						mu.Lock()
						unroutable = append(unroutable, err)
						mu.Unlock()
					}
					if errors.Is(err, amqpforward.ErrClosed) {
						return
					}
				}
			}()
		}
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, pub.Close())
		wg.Wait()
		if len(unroutable) > 0 {
			t.Fatalf("round %d: %d publishes to existing queue %s failed as unroutable, e.g. %v", round, len(unroutable), queue, unroutable[0])
		}
	}
}

func (p *stallProxy) dropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// After a lost connection, the next Publish dials again; a message whose
// context ends while the dial hangs (the broker accepts TCP and does not
// answer) does not wait for the dial.
func TestCancelledPublishReturnsWhileTheRedialStalls(t *testing.T) {
	pub, proxy, queue := proxiedPublisher(t, amqpforward.Config{})
	proxy.paused.Store(true)
	proxy.dropAll()
	relaytest.Eventually(t, "the client sees the connection gone", func() bool { return amqpforward.ConnectionLost(pub) })
	publishWithDeadline(t, pub, queue, proxy, []byte(`{}`))
	proxy.paused.Store(false)
	require.NoError(t, pub.Close())
}

// Two publishers built from one Config (or a publisher and a Subscriber
// from WatermillConfig(url, cfg)) dial at once, after a broker restart:
// amqp091-go writes to the Dial config's Properties, to its TLS settings
// (the server name, before the handshake, which fails here against a
// plain port) and to its Recovery settings, so each dial has a copy of its
// own (the race detector reports it otherwise).
func TestSharedDialConfig(t *testing.T) {
	url, conn := testamqp.Broker(t)
	queue := queueName(t, conn)
	configs := map[string]amqpforward.Config{
		url: {
			Queues: []string{queue},
			Dial: &amqp091.Config{
				Properties: amqp091.Table{"connection_name": "wmoutbox-review"},
				Recovery:   &amqp091.Recovery{},
			},
		},
		strings.Replace(url, "amqp://", "amqps://", 1): {
			Dial: &amqp091.Config{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}},
		},
	}
	for url, cfg := range configs {
		for range 5 {
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() {
					if pub, err := amqpforward.NewPublisher(url, cfg); err == nil {
						_ = pub.Close()
					}
				})
			}
			wg.Wait()
		}
	}
}

// stalledWriteSize is a payload larger than what the kernel buffers
// between the client and a broker that stopped reading hold (the client's
// send buffer, at most 4 MiB here, and the proxy's receive buffer, which
// does not grow while the proxy does not read): writing it blocks. Writes
// of 4 MiB already block here.
const stalledWriteSize = 8 << 20

// A broker that stopped reading (connection.blocked under a resource
// alarm, a stalled network) and a message whose frames do not fit in the
// socket buffers: the write blocks, and Publish must still return when the
// message's context ends.
func TestPublishReturnsWhileItsWriteStalls(t *testing.T) {
	pub, proxy, queue := proxiedPublisher(t, amqpforward.Config{Channels: 2})
	proxy.paused.Store(true)
	publishWithDeadline(t, pub, queue, proxy, make([]byte, stalledWriteSize))
}

// The same with messages of 256 KiB from as many publishes as there are
// channels, idle ones among them: once the socket buffers (a few MiB) are
// full, one write blocks holding the connection's write lock and the
// others wait for it. Each publish must return when its own context ends.
func TestPublishesReturnWhileTheBrokerStopsReading(t *testing.T) {
	const workers = 32
	pub, proxy, queue := proxiedPublisher(t, amqpforward.Config{Channels: workers})
	// Publishes that start together leave many idle channels, as a relay
	// under load does.
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range workers {
		wg.Go(func() {
			<-start
			require.NoError(t, pub.Publish(queue, message.NewMessage(watermill.NewUUID(), []byte(`{}`))))
		})
	}
	close(start)
	wg.Wait()
	proxy.paused.Store(true)

	done := make(chan error, workers)
	for range workers {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			msg := message.NewMessage(watermill.NewUUID(), make([]byte, 256<<10))
			msg.SetContext(ctx)
			done <- pub.Publish(queue, msg)
		}()
	}
	returned := 0
	timeout := time.After(3 * time.Second)
wait:
	for returned < workers {
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.DeadlineExceeded)
			returned++
		case <-timeout:
			break wait
		}
	}
	if returned < workers {
		closeErr := pub.Close()
		t.Errorf("%d of %d publishes of 256 KiB still blocked 3 s after their contexts ended; after Close (%v) one returned %v",
			workers-returned, workers, closeErr, <-done)
		for range workers - returned - 1 {
			t.Logf("a publish blocked past its context returned %v", <-done)
		}
	}
	_ = pub.Close()
}
