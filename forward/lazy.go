package forward

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
)

// LazyPublisher is a message.Publisher that builds its downstream
// publisher on first use. See [Lazy].
type LazyPublisher struct {
	connect func() (message.Publisher, error)

	mu         sync.Mutex
	pub        message.Publisher
	closed     bool
	connecting *connectAttempt // the connect under way, if any
	// inFlight counts the publishes to pub, which Close waits for. They
	// are counted under mu while closed is false, so none starts once
	// Close set it: a Publish arriving meanwhile fails at once.
	inFlight sync.WaitGroup

	closeOnce sync.Once // a second Close waits for the first
}

// connectAttempt is one call of connect, which every Publish arriving
// meanwhile waits for.
type connectAttempt struct {
	done chan struct{}
	err  error // set before done is closed
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
// Publish and Close are safe for concurrent use. One connect runs at a
// time, and the publishes that arrive meanwhile wait for it, each until
// its first message's context ends (the outbox subscriber ends it when it
// gives up on the delivery): a connect that hangs, on a broker host that
// drops packets, holds no delivery longer than that. Close is idempotent,
// waits for the publishes in flight, and closes the downstream publisher
// if one was built; it does not wait for a connect under way, whose
// publisher is closed when it returns.
func Lazy(connect func() (message.Publisher, error)) *LazyPublisher {
	return &LazyPublisher{connect: connect}
}

// Publish connects if needed, then publishes msgs on topic downstream. A
// connect failure is returned wrapped, naming the operation.
func (l *LazyPublisher) Publish(topic string, msgs ...*message.Message) error {
	ctx := context.Background()
	if len(msgs) > 0 {
		ctx = msgs[0].Context()
	}
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return ErrPublisherClosed
		}
		if pub := l.pub; pub != nil {
			l.inFlight.Add(1)
			l.mu.Unlock()
			defer l.inFlight.Done()
			return pub.Publish(topic, msgs...)
		}
		l.mu.Unlock()
		attempt := l.startConnect()
		if attempt == nil {
			continue // connected or closed meanwhile
		}
		select {
		case <-attempt.done:
			if attempt.err != nil {
				return attempt.err
			}
		case <-ctx.Done():
			return fmt.Errorf("forward: connect downstream publisher: %w", context.Cause(ctx))
		}
	}
}

// startConnect returns the connect under way, starting one if there is
// none, or nil when the publisher was connected or closed meanwhile. A
// connect that returns after Close closes what it built.
func (l *LazyPublisher) startConnect() *connectAttempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed || l.pub != nil:
		return nil
	case l.connecting != nil:
		return l.connecting
	}
	attempt := &connectAttempt{done: make(chan struct{})}
	l.connecting = attempt
	go func() {
		pub, err := l.connect()
		if err == nil && pub == nil {
			err = errors.New("connect returned no publisher")
		}
		l.mu.Lock()
		late := false
		switch {
		case err != nil:
			attempt.err = fmt.Errorf("forward: connect downstream publisher: %w", err)
		case l.closed:
			late = true
		default:
			l.pub = pub
		}
		l.connecting = nil
		close(attempt.done)
		l.mu.Unlock()
		if late {
			// Not under the lock, like Close's own: see Close.
			_ = pub.Close()
		}
	}()
	return attempt
}

// Close waits for the publishes in flight, makes further Publish calls
// fail with [ErrPublisherClosed], and closes the downstream publisher, if
// one was built. A second Close waits for the first and returns nil.
func (l *LazyPublisher) Close() (err error) {
	l.closeOnce.Do(func() { err = l.close() })
	return err
}

func (l *LazyPublisher) close() error {
	l.mu.Lock()
	l.closed = true
	pub := l.pub
	// Not held through the wait and the downstream Close, which may take
	// as long as a broker's timeouts: a Publish meanwhile fails at once.
	l.mu.Unlock()
	l.inFlight.Wait()
	if pub == nil {
		return nil
	}
	return pub.Close()
}
