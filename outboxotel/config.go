package outboxotel

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and the meter this
// package uses.
const ScopeName = "github.com/wmoutbox/wmoutbox/outboxotel"

// System is the value of messaging.system on the spans of events: the
// outbox relay is the messaging system that moves them (its store is a
// database, but the spans are of messaging, not of SQL).
const System = "wmoutbox"

// Attribute keys this package sets beside the semantic conventions'.
const (
	// AttributeAttempt is the delivery attempt, 1 for the first.
	AttributeAttempt = attribute.Key("wmoutbox.attempt")
	// AttributeSource is the path that delivered the event: "hot" or
	// "cold".
	AttributeSource = attribute.Key("wmoutbox.source")
	// AttributeOutcome is what the relay records for the attempt: "done",
	// "retry", "dead" or "deferred" (see [Middleware]).
	AttributeOutcome = attribute.Key("wmoutbox.outcome")
	// AttributeEventType is the event type.
	AttributeEventType = attribute.Key("wmoutbox.event_type")
	// AttributeAggregateType is the aggregate type.
	AttributeAggregateType = attribute.Key("wmoutbox.aggregate_type")
	// AttributeHandler is the Watermill router handler's name.
	AttributeHandler = attribute.Key("wmoutbox.handler")
	// AttributeOperation is the relay statement's operation (see
	// watermilladapter.Statement): claim, mark_done, record_outcomes,
	// release.
	AttributeOperation = attribute.Key("wmoutbox.operation")
	// AttributeEvents is how many events a relay statement is about: a
	// claim's limit, a batch's size.
	AttributeEvents = attribute.Key("wmoutbox.events")
	// AttributeRows is how many rows a relay statement claimed or
	// changed.
	AttributeRows = attribute.Key("wmoutbox.rows")
)

// Config configures the tracing of this package: [NewInjector],
// [Middleware] and [NewRelayTracer]. The zero value uses the global
// providers.
type Config struct {
	// TracerProvider makes the spans. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Propagator writes the trace context into the events' headers and
	// reads it back. Default: otel.GetTextMapPropagator(), which
	// propagates nothing until the application sets one, such as
	// propagation.NewCompositeTextMapPropagator(propagation.TraceContext{},
	// propagation.Baggage{}).
	Propagator propagation.TextMapPropagator
}

func (c Config) tracer() trace.Tracer {
	tp := c.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

func (c Config) propagator() propagation.TextMapPropagator {
	if c.Propagator == nil {
		return otel.GetTextMapPropagator()
	}
	return c.Propagator
}

// systemAttr is messaging.system.
var systemAttr = semconv.MessagingSystemKey.String(System)
