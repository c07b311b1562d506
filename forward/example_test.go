package forward_test

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/forward"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// printPublisher stands for Kafka or RabbitMQ.
type printPublisher struct{}

func (printPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		fmt.Printf("%s: %s %s id=%s attempt=%q\n", topic, m.UUID, m.Payload,
			m.Metadata.Get(watermilladapter.MetadataEventID), m.Metadata.Get(watermilladapter.MetadataAttempt))
	}
	return nil
}

func (printPublisher) Close() error { return nil }

func ExampleByAggregateType() {
	fwd, err := forward.Handler(forward.Config{
		Publisher: printPublisher{},
		Topic:     forward.ByAggregateType("events."),
	})
	if err != nil {
		panic(err)
	}

	// A message as an outbox subscriber delivers it.
	msg := message.NewMessage("5f2c7a1e-0000-4000-8000-000000000001", []byte(`{"order_id":"o-1"}`))
	msg.Metadata.Set(watermilladapter.MetadataEventID, "01JEXAMPLE0000000000000001")
	msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
	msg.Metadata.Set(watermilladapter.MetadataAttempt, "1")

	if err := fwd(msg); err != nil {
		panic(err)
	}
	// Output:
	// events.Order: 5f2c7a1e-0000-4000-8000-000000000001 {"order_id":"o-1"} id=01JEXAMPLE0000000000000001 attempt=""
}
