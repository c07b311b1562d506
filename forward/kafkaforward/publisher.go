package kafkaforward

import (
	"context"
	"fmt"
	"sync"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Publisher is a Watermill publisher to Kafka made for forwarding, built
// by [NewPublisher]: see the package documentation for the records it
// writes. Publish and Close are safe for concurrent use; Close is
// idempotent.
type Publisher struct {
	client   sarama.Client
	producer sarama.SyncProducer
	logger   watermill.LoggerAdapter

	// mu is held for reading by each send to Sarama, and for writing by
	// Close: Sarama's producer must not be closed during a send (it
	// panics sending on the input channel Close closed).
	mu     sync.RWMutex
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
	rec, err := recordMarshaler{}.Marshal(topic, msg)
	if err != nil {
		return fmt.Errorf("kafkaforward: message %s: %w", msg.UUID, err)
	}
	ctx := msg.Context()
	if ctx.Done() == nil {
		return p.send(msg.UUID, rec)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("kafkaforward: publish message %s to %s: %w", msg.UUID, topic, context.Cause(ctx))
	}
	done := make(chan error, 1)
	go func() { done <- p.send(msg.UUID, rec) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("kafkaforward: publish message %s to %s: %w", msg.UUID, topic, context.Cause(ctx))
	}
}

// send hands rec, the record of message uuid, to Sarama and waits for
// Kafka's answer.
func (p *Publisher) send(uuid string, rec *sarama.ProducerMessage) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	partition, offset, err := p.producer.SendMessage(rec)
	if err != nil {
		return fmt.Errorf("kafkaforward: produce message %s to %s: %w", uuid, rec.Topic, err)
	}
	p.logger.Trace("Message sent to Kafka", watermill.LogFields{
		"message_uuid": uuid, "topic": rec.Topic, "kafka_partition": partition, "kafka_partition_offset": offset,
	})
	return nil
}

// Close waits for the sends in flight, those of publishes that stopped
// waiting included (Sarama settles every record it was given before it
// closes, whatever Close does), then closes the producer and its
// connections. Further calls to Close return nil; further calls to
// Publish fail with [ErrClosed].
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	// The producer was made from the client and leaves it open.
	if err := p.producer.Close(); err != nil {
		_ = p.client.Close()
		return fmt.Errorf("kafkaforward: close producer: %w", err)
	}
	if err := p.client.Close(); err != nil {
		return fmt.Errorf("kafkaforward: close client: %w", err)
	}
	return nil
}
