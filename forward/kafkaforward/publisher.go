package kafkaforward

import (
	"context"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Publisher is a watermill-kafka publisher made for forwarding, built by
// [NewPublisher]. Publish and Close are safe for concurrent use; Close is
// idempotent.
type Publisher struct {
	// mu is held for reading by each send to Sarama, and for writing by
	// Close: watermill-kafka's Publisher must not be closed during a
	// Publish (Sarama panics sending on the input channel Close closed).
	mu     sync.RWMutex
	pub    *kafka.Publisher
	closed bool
}

var _ message.Publisher = (*Publisher)(nil)

// Publish sends msgs to topic, one after the other, and returns once
// Kafka acknowledged each of them, or with the first error. It waits for
// a message only until the message's context ends (the outbox subscriber
// ends it when it gives up on the delivery, at Close), then returns the
// context's error: Sarama may still write the record later, so the event
// may reach Kafka twice, never zero times. After Close it returns
// [ErrClosed].
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	for _, msg := range msgs {
		if err := p.publish(topic, msg); err != nil {
			return err
		}
	}
	return nil
}

// publish sends msg and waits for the outcome until msg's context ends.
// Sarama's SyncProducer takes no context: the send runs on a goroutine of
// its own, which Close waits for.
func (p *Publisher) publish(topic string, msg *message.Message) error {
	ctx := msg.Context()
	if ctx.Done() == nil {
		return p.send(topic, msg)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("kafkaforward: publish message %s to %s: %w", msg.UUID, topic, context.Cause(ctx))
	}
	done := make(chan error, 1)
	go func() { done <- p.send(topic, msg) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("kafkaforward: publish message %s to %s: %w", msg.UUID, topic, context.Cause(ctx))
	}
}

// send hands msg to watermill-kafka and waits for Kafka's answer.
func (p *Publisher) send(topic string, msg *message.Message) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	return p.pub.Publish(topic, msg)
}

// Close waits for the sends in flight, those of publishes that stopped
// waiting included (Sarama settles every record it was given before it
// closes, whatever Close does), then closes the producer.
// Further calls to Close return nil; further calls to Publish fail with
// [ErrClosed].
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return p.pub.Close()
}
