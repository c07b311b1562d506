package outboxotel

import (
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// Outcomes, the values of [AttributeOutcome].
const (
	OutcomeDone     = "done"
	OutcomeRetry    = "retry"
	OutcomeDead     = "dead"
	OutcomeDeferred = "deferred"
)

// Middleware returns a Watermill router middleware that traces each
// delivery of an outbox event: a CONSUMER span "process <topic>" (the
// topic the router's handler subscribed to), a
// CHILD of the span that wrote the event (its "create" span, read from
// the message's metadata with the propagator), so that one event's
// trace, from the request that wrote it to the consumers downstream, is
// one tree. See the package documentation for why a child and not a
// link, and for the span's attributes.
//
// The handler runs with the span in its message's context
// (msg.Context()), and the trace headers in the message's metadata are
// replaced with the span's, so that what the handler forwards (with
// package forward: the metadata become Kafka record headers or AMQP
// headers) continues from this delivery: a consumer downstream is a
// child of the attempt that delivered to it. The trace headers therefore
// differ between two deliveries of one event; deduplicate by
// outbox_event_id, as always.
//
// The span ends when the handler returns (or panics), with the outcome
// the relay records for the attempt ([watermilladapter.Outcome]) as
// wmoutbox.outcome: "done" leaves the status unset, as instrumentation
// should for success; "retry" and "dead" record the error and set the
// status to Error (an attempt that failed, retried or not, is what a
// trace of a slow event must show); "deferred" ([outbox.RetryAfter])
// records the error as an event and leaves the status unset, since the
// handler asked for it. Put the middleware inside outboxmw.RecordErrors,
// which then sees the same error, and outside Watermill's Recoverer, so
// that a panic is an error here too:
//
//	router.AddMiddleware(outboxmw.RecordErrors, outboxotel.Middleware(cfg), middleware.Recoverer)
//
// On messages a Subscriber did not deliver (another subscriber's), it
// continues their trace as well, with no attempt and no outcome.
func Middleware(cfg Config) message.HandlerMiddleware {
	tracer, propagator := cfg.tracer(), cfg.propagator()
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) (_ []*message.Message, err error) {
			ctx := msg.Context()
			topic := message.SubscribeTopicFromCtx(ctx)
			carrier := propagation.MapCarrier(msg.Metadata)
			opts := []trace.SpanStartOption{
				trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(
					systemAttr,
					semconv.MessagingOperationTypeProcess,
					semconv.MessagingOperationName("process"),
					semconv.MessagingDestinationName(topic),
					semconv.MessagingMessageBodySize(len(msg.Payload)),
				),
			}
			name := "process"
			if topic != "" {
				name += " " + topic
			}
			ctx, span := tracer.Start(propagator.Extract(ctx, carrier), name, opts...)
			defer span.End()
			span.SetAttributes(eventAttrs(msg)...)
			if name := message.HandlerNameFromCtx(ctx); name != "" {
				span.SetAttributes(AttributeHandler.String(name))
			}
			propagator.Inject(ctx, carrier)
			msg.SetContext(ctx)

			defer func() {
				if r := recover(); r != nil {
					end(span, msg, fmt.Errorf("panic: %v", r))
					panic(r)
				}
			}()
			msgs, err := h(msg)
			end(span, msg, err)
			return msgs, err
		}
	}
}

// eventAttrs are the attributes of msg's event read from its metadata.
func eventAttrs(msg *message.Message) []attribute.KeyValue {
	var attrs []attribute.KeyValue
	md := msg.Metadata
	if id := md.Get(watermilladapter.MetadataEventID); id != "" {
		attrs = append(attrs, semconv.MessagingMessageID(id))
	}
	if v := md.Get(watermilladapter.MetadataEventType); v != "" {
		attrs = append(attrs, AttributeEventType.String(v))
	}
	if v := md.Get(watermilladapter.MetadataAggregateType); v != "" {
		attrs = append(attrs, AttributeAggregateType.String(v))
	}
	if n, err := strconv.Atoi(md.Get(watermilladapter.MetadataAttempt)); err == nil {
		attrs = append(attrs, AttributeAttempt.Int(n))
	}
	if v := md.Get(watermilladapter.MetadataSource); v != "" {
		attrs = append(attrs, AttributeSource.String(v))
	}
	return attrs
}

// end sets the outcome of the handler's err on span.
func end(span trace.Span, msg *message.Message, err error) {
	status, known := watermilladapter.Outcome(msg, err)
	if !known {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		return
	}
	switch status {
	case outbox.StatusDone:
		span.SetAttributes(AttributeOutcome.String(OutcomeDone))
	case outbox.StatusNew:
		span.SetAttributes(AttributeOutcome.String(OutcomeDeferred))
		span.RecordError(err)
	case outbox.StatusDead:
		span.SetAttributes(AttributeOutcome.String(OutcomeDead))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	default:
		span.SetAttributes(AttributeOutcome.String(OutcomeRetry))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}
