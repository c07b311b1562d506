package outboxotel

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// Injector writes the trace context of a write into the headers of its
// events: an [outbox.HeaderInjector] for outbox.WriterConfig.Headers and
// watermilladapter.PublisherConfig.Headers. It is safe for concurrent
// use.
//
// For each event it starts and ends a PRODUCER span "create <topic>"
// (messaging.operation.type "create"), a child of the span in the
// writer's context (a new trace when there is none), and writes that
// span's context and the context's baggage into the event's headers with
// the propagator: traceparent, tracestate and baggage for W3C
// propagators. Headers of those names the event carried (a delivered
// message published again) are replaced. The span has no duration: the
// event is sent with the transaction's commit, which the writer does not
// see; it marks the event's creation, which the delivery's span is a
// child of.
type Injector struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
}

var _ outbox.HeaderInjector = (*Injector)(nil)

// NewInjector returns an Injector.
func NewInjector(cfg Config) *Injector {
	return &Injector{tracer: cfg.tracer(), propagator: cfg.propagator()}
}

// InjectHeaders implements [outbox.HeaderInjector].
func (in *Injector) InjectHeaders(ctx context.Context, e *outbox.Envelope) {
	ctx, span := in.tracer.Start(ctx, "create "+e.Topic,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			systemAttr,
			semconv.MessagingOperationTypeCreate,
			semconv.MessagingOperationName("create"),
			semconv.MessagingDestinationName(e.Topic),
			semconv.MessagingMessageID(e.ID),
			AttributeEventType.String(string(e.Type)),
		))
	if e.AggregateType != "" {
		span.SetAttributes(AttributeAggregateType.String(string(e.AggregateType)))
	}
	span.End()
	if e.Headers == nil {
		e.Headers = make(map[string]string, 3)
	}
	in.propagator.Inject(ctx, propagation.MapCarrier(e.Headers))
}
