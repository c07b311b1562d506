package kafkaforward

import (
	"sync"

	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Publisher is a watermill-kafka publisher made for forwarding, built by
// [NewPublisher]. Publish and Close are safe for concurrent use; Close is
// idempotent.
type Publisher struct {
	// mu is held for reading by each Publish while it hands records to
	// Sarama, and for writing by Close: watermill-kafka's Publisher must
	// not be closed during a Publish (Sarama panics sending on the input
	// channel Close closed).
	mu     sync.RWMutex
	pub    *kafka.Publisher
	closed bool
}

var _ message.Publisher = (*Publisher)(nil)

// Publish sends msgs to topic, one after the other, and returns once
// Kafka acknowledged each of them, or with the first error. After Close it
// returns [ErrClosed].
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	return p.pub.Publish(topic, msgs...)
}

// Close waits for the publishes in flight, then closes the producer.
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
