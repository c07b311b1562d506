package forward

import (
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
)

// LazyPublisher is a message.Publisher that builds its downstream
// publisher on first use. See [Lazy].
type LazyPublisher struct {
	connect func() (message.Publisher, error)

	// mu is held for reading by each Publish to the downstream publisher,
	// and for writing while connecting and closing: Close waits for the
	// publishes in flight.
	mu     sync.RWMutex
	pub    message.Publisher
	closed bool
}

var _ message.Publisher = (*LazyPublisher)(nil)

// Lazy returns a publisher that calls connect on its first Publish, and
// again on the next Publish after connect failed, then hands every Publish
// to the publisher connect returned. Publishers such as kafkaforward's and
// amqpforward's connect when they are built, and fail when the broker is
// down; behind Lazy a relay starts anyway, and the [Handler] returns the
// connection error for each event, which is retried as for any failed
// publish (RETRY, with the error in last_error) and goes DEAD when the
// subscriber's retry policy has no attempt left: see the package
// documentation. Reconnecting after the first success is left to the
// downstream publisher.
//
//	pub := forward.Lazy(func() (message.Publisher, error) {
//		return amqpforward.NewPublisher(url, amqpforward.Config{})
//	})
//
// Publish and Close are safe for concurrent use; a Publish that connects
// holds up the others until connect returns. Close is idempotent, waits
// for the publishes in flight, and closes the downstream publisher if one
// was built.
func Lazy(connect func() (message.Publisher, error)) *LazyPublisher {
	return &LazyPublisher{connect: connect}
}

// Publish connects if needed, then publishes msgs on topic downstream. A
// connect failure is returned wrapped, naming the operation.
func (l *LazyPublisher) Publish(topic string, msgs ...*message.Message) error {
	l.mu.RLock()
	pub, closed := l.pub, l.closed
	if pub != nil && !closed {
		defer l.mu.RUnlock()
		return pub.Publish(topic, msgs...)
	}
	l.mu.RUnlock()
	if closed {
		return ErrPublisherClosed
	}
	if err := l.connectOnce(); err != nil {
		return err
	}
	return l.Publish(topic, msgs...)
}

// connectOnce builds the downstream publisher unless another Publish did
// meanwhile, or Close came first.
func (l *LazyPublisher) connectOnce() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.pub != nil {
		return nil // Publish finds out which
	}
	pub, err := l.connect()
	if err != nil {
		return fmt.Errorf("forward: connect downstream publisher: %w", err)
	}
	if pub == nil {
		return fmt.Errorf("forward: connect downstream publisher: connect returned no publisher")
	}
	l.pub = pub
	return nil
}

// Close waits for the publishes in flight, closes the downstream
// publisher, if one was built, and makes further Publish calls fail with
// [ErrPublisherClosed].
func (l *LazyPublisher) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.pub == nil {
		return nil
	}
	return l.pub.Close()
}
