// Package kafkaforward builds a Kafka publisher (franz-go, writing the
// records watermill-kafka's publisher writes, which its subscriber reads)
// set up for forwarding outbox events: durable, idempotent, and keyed by
// aggregate so that the events of one aggregate stay on one partition.
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
// order the records were produced. That is the order of the writes when
// the relay is ordered (SubscriberConfig.Ordered): it hands an aggregate's
// next event over only once the one before it is DONE, whatever its
// WorkerCount. An unordered relay with WorkerCount above 1, or a retry,
// can forward two events of an aggregate in either order.
// Events without an aggregate id are keyed by their outbox event id, which
// spreads them over the partitions. The value is the payload, byte for
// byte. The headers are the message metadata (the outbox_* envelope keys
// and the user headers, see package forward) plus watermill-kafka's
// _watermill_message_uuid, which holds the message UUID. Batches are
// compressed with snappy (franz-go's default, which Kafka consumers have
// read since Kafka 0.8); kgo.ProducerBatchCompression in Config.Options
// changes it.
//
// Partitions are chosen as the Java producer chooses them for keyed
// records (murmur2 of the key), so a topic also written by Java producers
// keeps each aggregate on one partition. This package produced with
// Sarama, whose hash is FNV-1a, until 2026-11-27: see CHANGELOG.md for an
// aggregate whose events were forwarded before and after that change.
//
// # Durability
//
// [DefaultOptions] waits for all in-sync replicas (acks=all) with
// franz-go's idempotent producer, so that its own retries write no
// duplicates and a retried batch never overtakes the next one of its
// partition, and sends each record at once (no linger: every Publish waits
// for its record). franz-go retries what the broker answers with (a leader
// election); a record that has no answer after [DefaultDeliveryTimeout]
// fails its Publish, and the partition's records queued behind it with it,
// so that none overtakes it. What franz-go does not retry the outbox does:
// the forward handler returns the error and the event is delivered again
// later. A topic the broker does not create on first use fails after a few
// tries with UNKNOWN_TOPIC_OR_PARTITION, which the outbox retries too.
//
// A broker that takes the connection but never answers holds a request
// for franz-go's request timeout (about 20 s) before its records can fail:
// a Publish to a stalled broker returns an error after 20 to 30 s, well
// within the subscriber's default LockTimeout. The record may have been
// written all the same, so the event may reach Kafka twice (the producer
// is allowed to give up on records it sent:
// kgo.AllowIdempotentProduceCancellation). [Publisher.Publish] also stops
// waiting when the message's context ends (the outbox subscriber ends it
// when it gives up on a delivery at Close) and returns the context's
// error, failing no other message's publish; franz-go may still write the
// record, so here too the event may reach Kafka twice.
//
// franz-go refuses a record larger than its batch limit
// (kgo.ProducerBatchMaxBytes, 1,000,012 bytes by default) and so does the
// broker above its message.max.bytes; an outbox payload may be 1 MiB plus
// headers. Such an event fails on every attempt with MESSAGE_TOO_LARGE and
// ends DEAD: raise both limits if you write payloads that large.
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
// NewPublisher connects at once and fails when no broker answers within
// Config.ConnectTimeout, or when the broker refuses the idempotent
// producer its id; it leaves nothing connected when it fails. Wrap it in
// forward.Lazy for a relay that starts while Kafka is down.
//
// # Closing
//
// [Publisher.Close] may run while handlers still publish (a router whose
// CloseTimeout ran out): it waits for the publishes in flight, up to
// DefaultDeliveryTimeout, and the others, later ones included, fail with
// [ErrClosed], so their events are delivered again. Close is idempotent.
package kafkaforward
