package kafkaforward

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/eapache/go-resiliency/breaker"
)

// Publisher is a Watermill publisher to Kafka made for forwarding, built
// by [NewPublisher]: see the package documentation for the records it
// writes. Publish and Close are safe for concurrent use; Close is
// idempotent.
//
// It feeds Sarama's asynchronous producer and waits for each record's
// answer on a channel of its own, which the record carries as its
// Metadata, so that a Publish can stop waiting when its message's context
// ends (Sarama's SyncProducer takes no context), with no goroutine per
// record.
type Publisher struct {
	client   sarama.Client
	producer sarama.AsyncProducer
	logger   watermill.LoggerAdapter
	answers  sync.WaitGroup // the goroutines handing Sarama's answers to the records' channels

	// mu is held for reading while a record is handed to Sarama, and for
	// writing by Close: the producer's input must not be written to once
	// it shuts down (it panics sending on a closed channel).
	mu     sync.RWMutex
	closed bool

	closeOnce sync.Once // a second Close waits for the first
}

var _ message.Publisher = (*Publisher)(nil)

// newPublisher starts the goroutines that hand the producer's answers to
// the records' channels. producer must return successes and errors.
func newPublisher(client sarama.Client, producer sarama.AsyncProducer, logger watermill.LoggerAdapter) *Publisher {
	p := &Publisher{client: client, producer: producer, logger: logger}
	p.answers.Go(func() {
		for rec := range producer.Successes() {
			rec.Metadata.(chan error) <- nil
			p.logger.Trace("Message sent to Kafka", watermill.LogFields{
				"topic": rec.Topic, "kafka_partition": rec.Partition, "kafka_partition_offset": rec.Offset,
			})
		}
	})
	p.answers.Go(func() {
		causes := map[string]error{} // by topic, the last failure that did not come from the breaker
		for perr := range producer.Errors() {
			perr.Msg.Metadata.(chan error) <- withCause(perr, causes)
		}
	})
	return p
}

// withCause returns perr's error, and for a circuit breaker's refusal,
// the last other failure of the topic with it. Sarama stops producing to
// a topic or partition for 10 s after three failures in a row and then
// answers only "circuit breaker is open", which is what the outbox would
// record as the events' last error: a topic the broker does not create,
// or a broker refusing the client, would not show.
func withCause(perr *sarama.ProducerError, causes map[string]error) error {
	if !errors.Is(perr.Err, breaker.ErrBreakerOpen) {
		causes[perr.Msg.Topic] = perr.Err
		return perr.Err
	}
	if cause := causes[perr.Msg.Topic]; cause != nil {
		return fmt.Errorf("%w (after failures such as: %w)", perr.Err, cause)
	}
	return perr.Err
}

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

func (p *Publisher) publish(topic string, msg *message.Message) error {
	rec, err := recordMarshaler{}.Marshal(topic, msg)
	if err != nil {
		return fmt.Errorf("kafkaforward: message %s: %w", msg.UUID, err)
	}
	// Buffered: the answer of a record whose Publish stopped waiting is
	// dropped, not waited for.
	answer := make(chan error, 1)
	rec.Metadata = answer
	ctx := msg.Context()
	if err := p.hand(ctx, rec); err != nil {
		return fmt.Errorf("kafkaforward: publish message %s to %s: %w", msg.UUID, topic, err)
	}
	select {
	case err := <-answer:
		if err != nil {
			return fmt.Errorf("kafkaforward: produce message %s to %s: %w", msg.UUID, topic, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kafkaforward: publish message %s to %s: %w", msg.UUID, topic, context.Cause(ctx))
	}
}

// hand gives rec to the producer, waiting for room in its input until ctx
// ends.
func (p *Publisher) hand(ctx context.Context, rec *sarama.ProducerMessage) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	select {
	case p.producer.Input() <- rec:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Close waits for the records handed to Sarama, those of publishes that
// stopped waiting included (Sarama settles every record it was given
// before it shuts down, which against a stalled broker takes its
// timeouts), then closes the producer and its connections. Publish fails
// with [ErrClosed] from the moment Close begins; further calls to Close
// wait for the first and return nil.
func (p *Publisher) Close() (err error) {
	p.closeOnce.Do(func() { err = p.close() })
	return err
}

func (p *Publisher) close() error {
	p.mu.Lock()
	p.closed = true
	// The answers go to the records' channels, not to Close: Sarama's
	// Close would read them itself, and a waiting Publish would miss its
	// answer.
	p.producer.AsyncClose()
	// Held no longer: a Publish beginning now would wait for the lock
	// until the records settle, whatever its context says.
	p.mu.Unlock()
	p.answers.Wait()
	// The producer was made from the client and leaves it open.
	if err := p.client.Close(); err != nil {
		return fmt.Errorf("kafkaforward: close client: %w", err)
	}
	return nil
}
