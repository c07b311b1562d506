// Package kafkaforward builds a Kafka publisher (Sarama, writing the
// records watermill-kafka's publisher writes) set up for forwarding outbox
// events: durable, idempotent, and keyed by aggregate so that the events
// of one aggregate stay on one partition.
//
//	pub, err := kafkaforward.NewPublisher([]string{"kafka:9092"}, kafkaforward.Config{ClientID: "orders-relay"})
//	if err != nil { ... }
//	defer pub.Close()
//	fwd, err := forward.Handler(forward.Config{Publisher: pub})
//	router.AddConsumerHandler("forward-orders", "orders", outboxSub, fwd)
//
// # Records
//
// The record key is the event's aggregate id ([PartitionKey]): every event
// of one aggregate lands on the same partition, which Kafka keeps in the
// order the records were produced. That is the order of the writes only
// when the relay hands one aggregate's events over one at a time: with
// SubscriberConfig.WorkerCount above 1, or after a retry, two events of an
// aggregate can be forwarded in either order.
// Events without an aggregate id are keyed by their outbox event id, which
// spreads them over the partitions. The value is the payload, byte for
// byte. The headers are the message metadata (the outbox_* envelope keys
// and the user headers, see package forward) plus watermill-kafka's
// _watermill_message_uuid, which holds the message UUID.
//
// Partitions are chosen by Sarama's default hash partitioner (FNV-1a of the
// key). It is stable across restarts and relays, but it is not the Java
// client's murmur2: a topic also written by Java producers with the same
// keys may see an aggregate's events on two partitions. Set
// Config.Sarama with another Producer.Partitioner if that matters.
//
// # Durability
//
// [SaramaConfig] waits for all in-sync replicas (acks=all), turns on the
// idempotent producer (so Sarama's own retries write no duplicates), keeps
// one request in flight per broker (ordering), and retries an error the
// broker answers with (a leader election) for a few seconds before
// Publish gives up. What Sarama does not retry the outbox does: the
// forward handler returns the error and the event is delivered again
// later.
//
// A broker that takes the connection but never answers holds each of
// Sarama's tries for Net.ReadTimeout (30 s): minutes in all, longer than
// the subscriber's default LockTimeout. [Publisher.Publish] stops waiting
// when the message's context ends (the outbox subscriber ends it when it
// gives up on a delivery at Close) and returns the context's error; the
// record Sarama holds may still be written, so the event may reach Kafka
// twice. Lower Net.ReadTimeout (keep it above Producer.Timeout) or raise
// the LockTimeout if a stalled broker must not outlast the claim lease.
//
// Sarama refuses a record larger than Producer.MaxMessageBytes (1 MiB by
// default) and so does the broker above its message.max.bytes; an outbox
// payload may be 1 MiB plus headers. Such an event fails on every attempt
// and ends DEAD, with the size error in last_error: raise both limits if
// you write payloads that large.
//
// A topic name Kafka never accepts (empty, longer than 249 bytes, "." or
// "..", or with a character other than ASCII letters, digits, '.', '_'
// and '-'; an aggregate type with a space behind forward.ByAggregateType,
// say) fails as outbox.Permanent, so the event goes DEAD at once instead of
// after its attempts. So does a message whose metadata sets
// _watermill_message_uuid, which the record's UUID header takes.
//
// # Connecting
//
// NewPublisher connects at once and fails when no broker answers, or when
// the broker refuses the idempotent producer its id; it leaves nothing
// connected when it fails. Wrap it in forward.Lazy for a relay that starts
// while Kafka is down.
//
// # Closing
//
// [Publisher.Close] may run while handlers still publish (a router whose
// CloseTimeout ran out): it waits for the publishes in flight, and later
// ones fail with [ErrClosed], so their events are delivered again. Close
// is idempotent.
package kafkaforward
