package kafkaforward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Publisher is a Watermill publisher to Kafka made for forwarding, built
// by [NewPublisher]: see the package documentation for the records it
// writes. Publish and Close are safe for concurrent use; Close is
// idempotent.
type Publisher struct {
	client *kgo.Client
	logger *slog.Logger
	// room holds a token for each record in franz-go's buffer, up to its
	// MaxBufferedRecords: a publish waits for room here, where its
	// message's context can end the wait.
	room chan struct{}

	closed    atomic.Bool
	closeOnce sync.Once // a second Close waits for the first
}

var _ message.Publisher = (*Publisher)(nil)

// Publish sends msgs to topic, one after the other, and returns once
// Kafka acknowledged each of them, or with the first error. It waits for
// a message, and for room in franz-go's buffer of records
// (kgo.MaxBufferedRecords), only until the message's context ends (the
// outbox subscriber ends it when it gives up on the delivery, at Close),
// then returns the context's error: franz-go may still write the record
// later, so the event may reach Kafka twice, never zero times. One
// message's context ending fails no other message's publish. A limit on
// buffered bytes (kgo.MaxBufferedBytes, none by default) is waited for
// whatever the context. After Close it returns [ErrClosed].
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	for _, msg := range msgs {
		if err := p.publish(topic, msg); err != nil {
			return err
		}
	}
	return nil
}

func (p *Publisher) publish(topic string, msg *message.Message) error {
	if p.closed.Load() {
		return ErrClosed
	}
	rec, err := newRecord(topic, msg)
	if err != nil {
		return fmt.Errorf("kafkaforward: message %s: %w", msg.UUID, err)
	}
	ctx := msg.Context()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kafkaforward: publish message %s to %s: %w", msg.UUID, topic, context.Cause(ctx))
	}
	select {
	case p.room <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("kafkaforward: publish message %s to %s: %w", msg.UUID, topic, context.Cause(ctx))
	}
	// Buffered: the answer of a record whose Publish stopped waiting is
	// dropped, not waited for.
	answer := make(chan error, 1)
	// franz-go keeps the context Produce takes with the record and fails
	// every record buffered for a partition once the first one's context
	// ends: one message's end would fail the others' publishes. So the
	// context never ends, and the wait for room above is the one that
	// heeds the message's. franz-go calls the promise before it counts the
	// record out of its buffer, so a publish let in by that token can wait
	// in Produce for the count, a moment.
	p.client.Produce(context.Background(), rec, func(rec *kgo.Record, err error) {
		<-p.room
		// Asked first: the line's attributes would cost every record
		// allocations that a logger showing no debug lines throws away.
		if err == nil && p.logger.Enabled(context.Background(), slog.LevelDebug) {
			p.logger.Debug("kafkaforward: record sent to Kafka", slog.String("topic", rec.Topic),
				slog.Int("kafka_partition", int(rec.Partition)), slog.Int64("kafka_partition_offset", rec.Offset))
		}
		answer <- err
	})
	select {
	case err := <-answer:
		if errors.Is(err, kgo.ErrClientClosed) {
			return fmt.Errorf("kafkaforward: publish message %s to %s: %w (%w)", msg.UUID, topic, ErrClosed, err)
		}
		if err != nil {
			return fmt.Errorf("kafkaforward: produce message %s to %s: %w", msg.UUID, topic, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kafkaforward: publish message %s to %s: %w", msg.UUID, topic, context.Cause(ctx))
	}
}

// Close waits up to [DefaultDeliveryTimeout] for the records handed to
// franz-go, those of publishes that stopped waiting included, then closes
// the client and its connections: the publishes still waiting then fail
// with [ErrClosed], and their events are delivered again (their records
// may have reached Kafka). Publish fails with ErrClosed from the moment
// Close begins; further calls to Close wait for the first and return nil.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), DefaultDeliveryTimeout)
		defer cancel()
		// A flush that runs out leaves its records to Close, which fails
		// them: nothing to report beyond their publishes' errors.
		_ = p.client.Flush(ctx)
		p.client.Close()
	})
	return nil
}
