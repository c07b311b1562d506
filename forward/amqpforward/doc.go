// Package amqpforward builds a watermill-amqp publisher set up for
// forwarding outbox events to RabbitMQ (or another AMQP 0-9-1 broker):
// durable queues, persistent messages, and publisher confirms.
//
//	pub, err := amqpforward.NewPublisher("amqp://guest:guest@127.0.0.1:5672/", amqpforward.Config{
//		Queues: []string{"orders"}, // declared now, so nothing forwarded is dropped
//	})
//	if err != nil { ... }
//	defer pub.Close()
//	fwd, err := forward.Handler(forward.Config{Publisher: pub})
//	router.AddConsumerHandler("forward-orders", "orders", outboxSub, fwd)
//
// # Topology
//
// The configuration is watermill-amqp's durable queue one
// (amqp.NewDurableQueueConfig): a downstream topic is a durable queue of
// the same name, published to through the default exchange with the topic
// as routing key. A consumer reads the queue named after the topic, with
// any AMQP client or with a watermill-amqp Subscriber built from
// [WatermillConfig]. Several consumers of one queue share its messages
// (work queue); for fan-out to several services, bind more queues to an
// exchange of your own and use watermill-amqp's pub/sub configuration
// instead.
//
// The publisher declares no queue when it publishes: RabbitMQ drops a
// message routed to a queue that does not exist, and still confirms it. So
// [NewPublisher] declares Config.Queues when it connects. Every topic the
// forwarder may publish to must be listed there, or declared beforehand by
// the consumers or by operations; otherwise events would be marked DONE
// and lost.
//
// # Durability
//
// Queues are durable, messages are persistent (delivery mode 2), and each
// Publish waits for the broker's confirm: a publish returns nil only
// once RabbitMQ has taken responsibility for the message (for a durable
// queue, written it to disk). A negative confirm, or a channel closed
// before the confirm came, is an error, and the outbox delivers the event
// again.
//
// # Messages
//
// Body: the payload, byte for byte. Headers: the message metadata (the
// outbox_* envelope keys and the user headers, see package forward) as
// strings, plus watermill-amqp's _watermill_message_uuid holding the
// message UUID. Properties: MessageId is the outbox event id (the key
// consumers deduplicate by), Type the event type, Timestamp the time the
// event occurred (to the second). A message AMQP cannot carry (an event
// type or a metadata key over 255 bytes) or whose metadata uses
// _watermill_message_uuid is refused with an outbox.Permanent error, so
// the event goes DEAD with the reason. A Subscriber built from
// [WatermillConfig] reads the headers the broker adds that are not strings
// (x-delivery-count, x-death) as their text.
//
// # Connecting
//
// NewPublisher connects at once. When the broker does not answer it fails
// with the dial error wrapped (errors.Is(err, syscall.ECONNREFUSED) holds
// for a broker that is not running); the URL's credentials never appear in
// errors. Wrap it in forward.Lazy for a relay that starts while RabbitMQ
// is down: events then wait in the outbox, RETRY with the connection error
// in last_error. After a lost connection watermill-amqp reconnects in the
// background; meanwhile Publish fails and the events are retried.
package amqpforward
