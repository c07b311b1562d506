package outbox

import "context"

// HeaderInjector adds to an event, as it is written, entries of its
// headers taken from the writer's context: package outboxotel's
// injector writes the W3C trace context and baggage there, so that a
// trace goes on where the event is delivered (and forwarded: the
// forwarders pass headers on as Kafka record headers and AMQP headers).
// The engine knows nothing of tracing; this is the whole hook.
//
// Set it in [WriterConfig] (or watermilladapter.PublisherConfig).
// InjectHeaders is called once per event, on the writing goroutine,
// before the event is inserted: e has its id, topic and type, and
// e.Headers is the event's own copy
// (nil when it has none: set a new map). Entries it sets replace those of
// the same name; it must not change other fields, and must be safe for
// concurrent use. The headers it adds are validated again only when
// [WriterConfig].BeforeWrite hooks are set: keep them small, and their
// names out of the "outbox_" prefix.
type HeaderInjector interface {
	InjectHeaders(ctx context.Context, e *Envelope)
}
