package watermilladapter

import (
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// Metadata keys. On Publish, the Envelope keys set the outbox envelope's
// fields and are not stored as headers, [MetadataAttempt] and
// [MetadataSource] are dropped (a delivered message published again
// starts afresh), "outbox_message_uuid", the header that keeps the
// message UUID, is reserved (an entry under it is dropped), and every
// other metadata entry is stored as a header and comes back as metadata.
// A message published with an empty UUID is delivered with its event id
// as UUID. On delivery the
// subscriber sets all of them but [MetadataDeliverAfter] and
// [MetadataDeliverIn]: by then the event is due, and a message forwarded
// with them would be delayed again.
const (
	// MetadataEventType sets the event type. Default: the topic.
	MetadataEventType = "outbox_event_type"
	// MetadataAggregateType sets the aggregate type. Default "__GLOBAL__".
	MetadataAggregateType = "outbox_aggregate_type"
	// MetadataAggregateID sets the aggregate id.
	MetadataAggregateID = "outbox_aggregate_id"
	// MetadataTenantID sets the tenant id.
	MetadataTenantID = "outbox_tenant_id"
	// MetadataDeliverAfter delays delivery until this time (RFC 3339).
	MetadataDeliverAfter = "outbox_deliver_after"
	// MetadataDeliverIn delays delivery by a duration from the write, a
	// Go duration ("90s", "1h30m"; outbox.Envelope's DeliverIn). Not with
	// MetadataDeliverAfter.
	MetadataDeliverIn = "outbox_deliver_in"
	// MetadataOccurredAt is when the event happened (RFC 3339). Default:
	// the time of publishing.
	MetadataOccurredAt = "outbox_occurred_at"
	// MetadataEventID is the outbox event id, set on delivery: the key
	// consumers deduplicate by. Setting it on Publish chooses the id, so a
	// delivered message published again through a Publisher keeps its
	// event id, and on the table it came from fails with
	// outbox.ErrDuplicateEvent (Watermill's PoisonQueue middleware on an
	// outbox Publisher, say): delete the key from the metadata first to
	// write it as a new event.
	MetadataEventID = "outbox_event_id"
	// MetadataIdempotencyKey sets the event's idempotency key (see
	// outbox.Envelope.IdempotencyKey): a message published with a key that
	// an event of its topic has is not written, and Publish returns no
	// error for it (with PublisherConfig.RejectDuplicateKeys it fails with
	// outbox.ErrDuplicateKey instead). Set on delivery when the event has
	// one, so a handler can tell which command wrote it.
	MetadataIdempotencyKey = "outbox_idempotency_key"

	// MetadataAttempt is the delivery attempt, 1 for the first, set on
	// delivery.
	MetadataAttempt = "outbox_attempt"
	// MetadataSource says which path delivered the event: "hot" (right
	// after commit, in the writing process), "cold" (claimed from the
	// table) or "log" (streamed by a feed, in log mode).
	MetadataSource = "outbox_source"

	// headerMessageUUID stores the Watermill message UUID, so the handler
	// sees the UUID that was published.
	headerMessageUUID = "outbox_message_uuid"
)

// Sources of a delivery, the values of [MetadataSource].
const (
	SourceHot  = "hot"
	SourceCold = "cold"
	SourceLog  = "log"
)

// envelopeKeys are consumed by toEnvelope rather than stored as headers.
var envelopeKeys = map[string]bool{
	MetadataEventType: true, MetadataAggregateType: true, MetadataAggregateID: true,
	MetadataTenantID: true, MetadataDeliverAfter: true, MetadataDeliverIn: true, MetadataOccurredAt: true,
	MetadataEventID: true, MetadataIdempotencyKey: true, MetadataAttempt: true, MetadataSource: true,
	headerMessageUUID: true,
}

// toEnvelope maps a published message to the envelope stored for it.
func toEnvelope(topic string, msg *message.Message) (outbox.Envelope, error) {
	md := msg.Metadata
	e := outbox.Envelope{
		ID:             md.Get(MetadataEventID),
		Type:           outbox.EventType(md.Get(MetadataEventType)),
		Topic:          topic,
		AggregateType:  outbox.AggregateType(md.Get(MetadataAggregateType)),
		AggregateID:    md.Get(MetadataAggregateID),
		TenantID:       md.Get(MetadataTenantID),
		PayloadBytes:   msg.Payload,
		IdempotencyKey: md.Get(MetadataIdempotencyKey),
	}
	if e.Type == "" {
		e.Type = outbox.EventType(topic)
	}
	if e.PayloadBytes == nil {
		e.PayloadBytes = []byte{}
	}
	var err error
	if e.DeliverAfter, err = parseTime(md, MetadataDeliverAfter); err != nil {
		return e, err
	}
	if e.OccurredAt, err = parseTime(md, MetadataOccurredAt); err != nil {
		return e, err
	}
	if v := md.Get(MetadataDeliverIn); v != "" {
		if e.DeliverIn, err = time.ParseDuration(v); err != nil {
			return e, fmt.Errorf("%w: metadata %s: want a Go duration (90s, 1h30m), got %q: %w",
				outbox.ErrInvalidEnvelope, MetadataDeliverIn, v, err)
		}
	}
	e.Headers = make(map[string]string, len(md)+1)
	for k, v := range md {
		if !envelopeKeys[k] {
			e.Headers[k] = v
		}
	}
	e.Headers[headerMessageUUID] = msg.UUID
	return e, nil
}

func parseTime(md message.Metadata, key string) (time.Time, error) {
	v := md.Get(key)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: metadata %s: want an RFC 3339 time in years 1 to 9999 (2026-11-27T09:30:00Z), got %q: %w",
			outbox.ErrInvalidEnvelope, key, v, err)
	}
	return t, nil
}

// toMessage maps a queued event to the message a handler receives.
func toMessage(item *queued) *message.Message {
	e := &item.row
	uuid := item.headers[headerMessageUUID]
	if uuid == "" {
		uuid = e.ID // written by the outbox.Writer, not by the Publisher
	}
	msg := message.NewMessage(uuid, e.Payload)
	for k, v := range item.headers {
		if k != headerMessageUUID {
			msg.Metadata.Set(k, v)
		}
	}
	msg.Metadata.Set(MetadataEventID, e.ID)
	msg.Metadata.Set(MetadataEventType, e.Type)
	msg.Metadata.Set(MetadataAggregateType, e.AggregateType)
	if e.AggregateID != "" {
		msg.Metadata.Set(MetadataAggregateID, e.AggregateID)
	}
	if e.TenantID != "" {
		msg.Metadata.Set(MetadataTenantID, e.TenantID)
	}
	if e.IdempotencyKey != "" {
		msg.Metadata.Set(MetadataIdempotencyKey, e.IdempotencyKey)
	}
	msg.Metadata.Set(MetadataOccurredAt, e.OccurredAt.UTC().Format(time.RFC3339Nano))
	msg.Metadata.Set(MetadataAttempt, strconv.Itoa(e.Attempts+1))
	msg.Metadata.Set(MetadataSource, item.source)
	return msg
}
