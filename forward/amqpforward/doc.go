// Package amqpforward is a Watermill publisher for forwarding outbox
// events to RabbitMQ (or another AMQP 0-9-1 broker): durable queues,
// persistent messages, publisher confirms, and mandatory routing, so that
// Publish returns nil only for a message a queue holds.
//
//	pub, err := amqpforward.NewPublisher("amqp://guest:guest@127.0.0.1:5672/", amqpforward.Config{
//		Queues: []string{"orders"}, // declared at connect, so events find their queue
//	})
//	if err != nil { ... }
//	defer pub.Close()
//	fwd, err := forward.Handler(forward.Config{Publisher: pub})
//	router.AddConsumerHandler("forward-orders", "orders", outboxSub, fwd)
//
// # Topology
//
// The topology is watermill-amqp's durable queue one
// (amqp.NewDurableQueueConfig): a downstream topic is a durable queue of
// the same name, published to through the default exchange with the topic
// as routing key. A consumer reads the queue named after the topic, with
// any AMQP client or with a watermill-amqp Subscriber built from
// [WatermillConfig]. Several consumers of one queue share its messages
// (work queue); for fan-out to several services, bind more queues to an
// exchange of your own and use watermill-amqp's pub/sub configuration
// instead.
//
// [NewPublisher] declares Config.Queues when it connects, and again on
// every reconnection. A topic with no queue (not listed there, and not
// declared by the consumers or by operations) is not lost: RabbitMQ would
// confirm such a message and drop it, but the publisher publishes
// mandatory, the broker returns the message, and Publish fails with
// [ErrUnroutable]. The event is then retried (RETRY, the error in
// last_error) until the queue exists, or goes DEAD when the retry policy
// gives up, to be replayed.
//
// # Order
//
// A queue keeps the order messages were confirmed in, and a relay with
// SubscriberConfig.Ordered hands an aggregate's next event over only once
// the one before is DONE, which is after its confirm: one queue holds an
// aggregate's events in the order they were written. Several consumers of
// the queue, or a consumer's requeued message, can still process them out
// of order; with an unordered relay, events of one aggregate may be
// published concurrently, in any order.
//
// # Durability
//
// Queues are durable, messages are persistent (delivery mode 2), and each
// Publish waits for the broker's confirm: a publish returns nil only
// once a queue holds the message and RabbitMQ has taken responsibility for
// it (for a durable queue, written it to disk). A negative confirm, a
// returned message, or a channel closed before the confirm came, is an
// error, and the outbox delivers the event again. Each Publish in flight
// has an AMQP channel of its own, up to Config.Channels, and its messages
// go one at a time.
//
// # Messages
//
// Body: the payload, byte for byte. Headers: the message metadata (the
// outbox_* envelope keys and the user headers, see package forward) as
// strings, plus watermill-amqp's _watermill_message_uuid holding the
// message UUID. Properties: MessageId is the outbox event id (the key
// consumers deduplicate by), Type the event type, Timestamp the time the
// event occurred (to the second). A message AMQP cannot carry (an event
// type, a metadata key, a topic or a message id over 255 bytes; headers
// and properties over the connection's frame_max, 128 KiB by default,
// which AMQP cannot split) or whose metadata uses _watermill_message_uuid,
// or RabbitMQ's CC or BCC (lists of queues), is refused with an
// outbox.Permanent error, so the event goes DEAD with the reason; a
// Publish of several messages
// refuses all of them before it sends any. A Subscriber built from
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
// in last_error. After a lost connection the next Publish dials again
// (after a failed dial, Publish fails with its error for a second before
// the next); the publishes that were in flight fail, and their events are
// delivered again. Publish waits for a channel, the connection, the write
// of each message and its confirm only until the message's context ends,
// and Close waits at most 2 s for the broker: a broker that stopped
// reading (a resource alarm) holds up neither. A write the broker does
// not read keeps its channel, one of Config.Channels, until the broker
// reads again or the connection closes. Config.Dial may not set
// Recovery: the publisher dials again by itself.
package amqpforward
