package outboxotel

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// RelayTracer makes a CLIENT span of each statement of the relay on the
// database: a watermilladapter.Tracer for
// watermilladapter.SubscriberConfig.Tracer. One span per statement, not
// per event: "outbox claim <topic>" for a claim, "outbox mark_done",
// "outbox record_outcomes" and "outbox release" for the batched
// statements of outcomes and releases. Attributes: wmoutbox.operation,
// wmoutbox.events (the claim's limit, the batch's size), wmoutbox.rows
// (what it claimed or changed), messaging.system and, for a claim,
// messaging.destination.name. A failed statement records its error and
// has status Error; a statement retried is a span per try.
//
// The statements run on the relay's own goroutines, in no request, so
// each span is the root of a trace of its own: sample them as you
// sample other background work. It is safe for concurrent use.
type RelayTracer struct {
	tracer trace.Tracer
}

var _ watermilladapter.Tracer = (*RelayTracer)(nil)

// NewRelayTracer returns a RelayTracer. Config.Propagator is not used.
func NewRelayTracer(cfg Config) *RelayTracer {
	return &RelayTracer{tracer: cfg.tracer()}
}

// StartStatement implements watermilladapter.Tracer.
func (t *RelayTracer) StartStatement(ctx context.Context, st watermilladapter.Statement) (context.Context, func(rows int, err error)) {
	name := "outbox " + st.Operation
	if st.Topic != "" {
		name += " " + st.Topic
	}
	ctx, span := t.tracer.Start(ctx, name,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(systemAttr, AttributeOperation.String(st.Operation), AttributeEvents.Int(st.Events)))
	if st.Topic != "" {
		span.SetAttributes(semconv.MessagingDestinationName(st.Topic))
	}
	return ctx, func(rows int, err error) {
		span.SetAttributes(AttributeRows.Int(rows))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
