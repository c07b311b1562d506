// Package forward relays outbox events to another Watermill publisher:
// Kafka, RabbitMQ, or any other message.Publisher. [Handler] is a router
// handler for a watermilladapter.Subscriber; the subpackages kafkaforward
// and amqpforward build downstream publishers with settings chosen for
// durability.
//
//	fwd, err := forward.Handler(forward.Config{Publisher: kafkaPub})
//	router.AddMiddleware(outboxmw.RecordErrors) // the publish error lands in last_error
//	router.AddConsumerHandler("forward-orders", "orders", outboxSub, fwd)
//
// # What goes downstream
//
// One downstream message per event, published before the handler returns:
//
//   - the UUID the event was published with, and its payload byte for byte;
//   - every user header (the metadata given on Publish);
//   - the outbox envelope, as the watermilladapter.Metadata* keys:
//     [watermilladapter.MetadataEventID], MetadataEventType,
//     MetadataAggregateType, MetadataAggregateID and MetadataTenantID (when
//     set), and MetadataOccurredAt.
//
// The delivery-only keys [watermilladapter.MetadataAttempt] and
// [watermilladapter.MetadataSource] are not passed on: they describe one
// delivery inside the relay, not the event. Without them a duplicate sent
// downstream (after a crash, or a retry of a publish that had in fact
// succeeded) is identical to the first copy, headers included.
//
// # Duplicates
//
// Delivery is at least once, and so is forwarding: an event is recorded DONE
// only after the downstream publish returned, and a crash or a lost
// acknowledgement in between sends it again. Consumers deduplicate by the
// outbox_event_id header ([watermilladapter.MetadataEventID]), which is
// the same on every copy.
//
// # Errors
//
// The handler returns the downstream publish error, wrapped, so the
// outbox's rules apply: the event is retried with the subscriber's retry
// policy and goes DEAD when the attempts are spent. With the middleware
// package's RecordErrors the error, and what it wraps, is stored in
// last_error, and errors marked with outbox.Permanent, outbox.RetryAfter
// or outbox.FailRetryAfter (by a Topic function, say) keep their meaning.
//
// A downstream outage spends the attempts of the events that meet it:
// with the default retry policy (10 attempts, backoff capped at 60 s) an
// event goes DEAD about two minutes into an outage. Give the subscriber a
// RetryPolicy whose attempts outlast the outages you plan for (attempts at
// the 60 s cap, each a minute more), or replay the DEAD events once the
// broker is back (ReplayDead on the store). They are never lost: DEAD
// rows stay in the table until you replay or purge them.
//
// A downstream broker that is down when the relay starts need not stop it:
// [Lazy] connects on first use, so the events wait in the table, RETRY
// with the connection error in last_error, and are delivered once the
// broker is back, as long as their attempts last.
package forward
