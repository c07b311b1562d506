package outbox

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/codec"
)

// EventType names a kind of event. Declare your event types as constants:
//
//	const OrderCreated outbox.EventType = "OrderCreated"
type EventType string

// AggregateType names the kind of entity an event belongs to. Declare your
// aggregate types as constants, like [EventType].
type AggregateType string

// GlobalAggregate is the aggregate type of events that set none.
const GlobalAggregate AggregateType = "__GLOBAL__"

// Limits enforced by the writer. Text fields have limits too, in
// characters, which match the table's columns: see [Envelope].
const (
	MaxPayloadSize = 1 << 20 // bytes; exactly 1 MiB is allowed
	MaxHeadersSize = 1 << 20 // bytes of the keys and values together
	MaxEventIDLen  = 36      // characters: a ULID (26) or a UUID (36)
)

// Limits of the other text fields, in characters.
const (
	maxEventTypeLen     = 128
	maxTopicLen         = 255
	maxAggregateTypeLen = 64
	maxAggregateIDLen   = 128
	maxTenantIDLen      = 64
	maxIdempotencyKey   = 255
)

// Envelope is an event as written by business code. It is a plain value:
// the writer validates it, fills in defaults and stores copies of its
// headers and payload, so changing the caller's map or slice after a write
// changes nothing that was written or will be delivered.
//
// Set exactly one of PayloadJSON and PayloadBytes. The payload is stored as
// the given bytes and delivered byte for byte identical, on the hot path
// and the cold path alike.
type Envelope struct {
	// ID identifies the event; consumers deduplicate by it. Default: a new
	// monotonic ULID. At most [MaxEventIDLen] characters.
	ID string
	// Type is required, at most 128 characters.
	Type EventType
	// Topic is where the event is routed: the Watermill topic, at most 255
	// characters. Default: Type.
	Topic string
	// OccurredAt is when the business fact happened, in the years 1 to
	// 9999 (what RFC 3339 metadata can carry). It is kept to the
	// microsecond, as the stores keep it. Default: the writer's clock at
	// the time of the write.
	OccurredAt time.Time
	// AggregateType defaults to [GlobalAggregate]; at most 64 characters.
	AggregateType AggregateType
	// AggregateID identifies the entity; optional, at most 128 characters.
	AggregateID string
	// TenantID is carried through untouched; optional, at most 64
	// characters.
	TenantID string
	// Headers travel with the event. Keys must be non-empty; keys and
	// values, valid UTF-8 without NUL, take at most [MaxHeadersSize]
	// bytes together.
	Headers map[string]string
	// PayloadJSON is a JSON document; it must be valid JSON.
	PayloadJSON []byte
	// PayloadBytes is an opaque payload (protobuf, Avro, text...). An empty
	// non-nil slice is an empty payload.
	PayloadBytes []byte
	// DeliverAfter delays delivery: the event is not handed out before this
	// time. Zero (or a time not after the write, which the writer makes
	// zero) means at once. Like OccurredAt, it lies in the years 1 to 9999
	// and is kept to the microsecond.
	DeliverAfter time.Time
	// DeliverIn delays delivery by a duration from the write: the writer
	// sets DeliverAfter to its clock's time of the write plus DeliverIn,
	// and DeliverIn to zero, in the events it writes and hands on. Zero
	// means no delay; a negative one, or one set with DeliverAfter, is
	// invalid.
	DeliverIn time.Duration
	// IdempotencyKey, when set, names the write of this event within its
	// topic, so that a command retried by its caller writes its event
	// once: the [Writer] skips an event whose topic and key an event in
	// the table has (see [Writer.WriteDetailed]), or with
	// [WriterConfig.RejectDuplicateKeys] fails with [ErrDuplicateKey].
	// Either way the caller's transaction goes on. A key is taken as long
	// as its event's row is kept: once retention purges the row, or a
	// store that deletes delivered events deletes it, the key can be
	// written again. Optional, at most 255 characters, valid UTF-8
	// without NUL.
	IdempotencyKey string
}

// NewJSON returns an envelope with a JSON payload.
func NewJSON(eventType EventType, payload []byte) Envelope {
	return Envelope{Type: eventType, PayloadJSON: payload}
}

// NewBytes returns an envelope with an opaque payload.
func NewBytes(eventType EventType, payload []byte) Envelope {
	return Envelope{Type: eventType, PayloadBytes: payload}
}

// MarshalJSON returns an envelope whose JSON payload is v encoded once with
// encoding/json.
func MarshalJSON(eventType EventType, v any) (Envelope, error) {
	payload, err := json.Marshal(v)
	if err != nil {
		return Envelope{}, fmt.Errorf("outbox: marshal %s payload: %w", eventType, err)
	}
	return NewJSON(eventType, payload), nil
}

// Payload returns the payload bytes, whichever field holds them.
func (e *Envelope) Payload() []byte {
	if e.PayloadJSON != nil {
		return e.PayloadJSON
	}
	return e.PayloadBytes
}

// IsJSON reports whether the payload was given as JSON.
func (e *Envelope) IsJSON() bool { return e.PayloadJSON != nil }

// prepare validates envelopes and returns copies with every default filled
// in: the values the writer inserts and hands to the hot path. On the
// first invalid envelope it returns a [*ValidationError] and nothing else.
func prepare(envelopes []Envelope, now time.Time) ([]Envelope, error) {
	out := make([]Envelope, len(envelopes))
	for i, e := range envelopes {
		if err := e.validate(); err != nil {
			err.Index = i
			return nil, err
		}
		if e.ID == "" {
			e.ID = NewID()
		}
		if e.Topic == "" {
			e.Topic = string(e.Type)
		}
		if e.OccurredAt.IsZero() {
			e.OccurredAt = now
		}
		// What the hot path hands out then equals what a claim reads back.
		e.OccurredAt = e.OccurredAt.Truncate(time.Microsecond)
		if e.DeliverIn > 0 {
			e.DeliverAfter, e.DeliverIn = now.Add(e.DeliverIn), 0
		}
		e.DeliverAfter = e.DeliverAfter.Truncate(time.Microsecond)
		if !e.DeliverAfter.After(now) {
			e.DeliverAfter = time.Time{} // due at once: the hot path takes it
		}
		if e.AggregateType == "" {
			e.AggregateType = GlobalAggregate
		}
		e.Headers = maps.Clone(e.Headers)
		if len(e.Headers) == 0 {
			e.Headers = nil
		}
		e.PayloadJSON = cloneKeepEmpty(e.PayloadJSON)
		e.PayloadBytes = cloneKeepEmpty(e.PayloadBytes)
		out[i] = e
	}
	return out, nil
}

// cloneKeepEmpty copies b, keeping the difference between nil and empty.
func cloneKeepEmpty(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

func (e *Envelope) validate() *ValidationError {
	fail := func(field, format string, args ...any) *ValidationError {
		return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if e.Type == "" {
		return fail("Type", "event type is required")
	}
	texts := []struct {
		field, value string
		max          int
	}{
		{"ID", e.ID, MaxEventIDLen},
		{"Type", string(e.Type), maxEventTypeLen},
		{"Topic", e.Topic, maxTopicLen},
		{"AggregateType", string(e.AggregateType), maxAggregateTypeLen},
		{"AggregateID", e.AggregateID, maxAggregateIDLen},
		{"TenantID", e.TenantID, maxTenantIDLen},
		{"IdempotencyKey", e.IdempotencyKey, maxIdempotencyKey},
	}
	for _, t := range texts {
		if reason := codec.CheckText(t.value, t.max); reason != "" {
			return fail(t.field, "%s", reason)
		}
	}
	if reason := codec.ValidateHeaders(e.Headers, MaxHeadersSize); reason != "" {
		return fail("Headers", "%s", reason)
	}
	payloadField := "PayloadJSON"
	switch {
	case e.PayloadJSON == nil && e.PayloadBytes == nil:
		return fail(payloadField, "set one of PayloadJSON and PayloadBytes")
	case e.PayloadJSON != nil && e.PayloadBytes != nil:
		return fail("PayloadBytes", "set only one of PayloadJSON and PayloadBytes")
	case e.PayloadBytes != nil:
		payloadField = "PayloadBytes"
	}
	if n := len(e.Payload()); n > MaxPayloadSize {
		return fail(payloadField, "%d bytes exceeds the limit of %d", n, MaxPayloadSize)
	}
	if e.PayloadJSON != nil && !json.Valid(e.PayloadJSON) {
		return fail("PayloadJSON", "not valid JSON")
	}
	switch {
	case e.DeliverIn < 0:
		return fail("DeliverIn", "%s is negative", e.DeliverIn)
	case e.DeliverIn > 0 && !e.DeliverAfter.IsZero():
		return fail("DeliverIn", "set only one of DeliverAfter and DeliverIn")
	}
	for _, t := range []struct {
		field string
		value time.Time
	}{{"OccurredAt", e.OccurredAt}, {"DeliverAfter", e.DeliverAfter}} {
		if year := t.value.UTC().Year(); !t.value.IsZero() && (year < 1 || year > 9999) {
			return fail(t.field, "year %d is outside 1 to 9999", year)
		}
	}
	return nil
}
