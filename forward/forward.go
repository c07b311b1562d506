package forward

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/internal/nilcheck"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// Config configures [Handler].
type Config struct {
	// Publisher receives the forwarded events. Required. The handler does
	// not close it.
	Publisher message.Publisher

	// Topic names the downstream topic of a message. Default: the outbox
	// topic the message was delivered on (message.SubscribeTopicFromCtx,
	// set by Watermill's router). See [ByAggregateType].
	Topic func(msg *message.Message) (string, error)
}

// deliveryKeys describe one delivery inside the relay and are not
// forwarded.
var deliveryKeys = map[string]bool{
	watermilladapter.MetadataAttempt: true,
	watermilladapter.MetadataSource:  true,
}

// Handler returns a router handler that publishes each message to
// cfg.Publisher and returns the publish error, if any. See the package
// documentation for what the downstream message carries. It fails with an
// error matching outbox.ErrInvalidRequest when cfg.Publisher is nil.
//
// The handler is safe for concurrent use if cfg.Publisher and cfg.Topic
// are: Watermill's router calls it from one goroutine per message.
func Handler(cfg Config) (message.NoPublishHandlerFunc, error) {
	if nilcheck.Is(cfg.Publisher) {
		return nil, fmt.Errorf("%w: forward: Config.Publisher is required", outbox.ErrInvalidRequest)
	}
	topicOf := cfg.Topic
	if topicOf == nil {
		topicOf = subscribeTopic
	}
	pub := cfg.Publisher
	return func(msg *message.Message) error {
		topic, err := topicOf(msg)
		if err != nil {
			return fmt.Errorf("forward: event %s: downstream topic: %w", eventID(msg), err)
		}
		if topic == "" {
			return fmt.Errorf("forward: event %s: %w", eventID(msg), ErrNoTopic)
		}
		if err := pub.Publish(topic, Downstream(msg)); err != nil {
			return fmt.Errorf("forward: publish event %s to %s: %w", eventID(msg), topic, err)
		}
		return nil
	}, nil
}

// Downstream returns the message [Handler] publishes for msg: the same
// UUID and payload, all metadata but the delivery-only keys, and msg's
// context (a publisher that honours it stops when the delivery ends). The
// payload slice is shared, not copied.
func Downstream(msg *message.Message) *message.Message {
	out := message.NewMessage(msg.UUID, msg.Payload)
	for k, v := range msg.Metadata {
		if !deliveryKeys[k] {
			out.Metadata[k] = v
		}
	}
	out.SetContext(msg.Context())
	return out
}

func subscribeTopic(msg *message.Message) (string, error) {
	return message.SubscribeTopicFromCtx(msg.Context()), nil
}

// ByAggregateType returns a Config.Topic function that sends each event to
// prefix followed by its aggregate type: with prefix "outbox.", an "Order"
// event goes to "outbox.Order", and an event written without an aggregate
// type to "outbox.__GLOBAL__" (outbox.GlobalAggregate). A message that
// carries no [watermilladapter.MetadataAggregateType] (one that did not
// come from an outbox subscriber) gets an error matching [ErrNoTopic].
func ByAggregateType(prefix string) func(*message.Message) (string, error) {
	return func(msg *message.Message) (string, error) {
		at := msg.Metadata.Get(watermilladapter.MetadataAggregateType)
		if at == "" {
			return "", fmt.Errorf("%w: no %s metadata", ErrNoTopic, watermilladapter.MetadataAggregateType)
		}
		return prefix + at, nil
	}
}

func eventID(msg *message.Message) string {
	if id := msg.Metadata.Get(watermilladapter.MetadataEventID); id != "" {
		return id
	}
	return "(message " + msg.UUID + ")"
}
