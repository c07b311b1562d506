package outboxotel_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outboxotel"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// TestWriterInjectsTraceContext writes with an outbox.Writer: the row's
// headers carry the context of a "create" span, child of the writer's,
// and the writer's baggage.
func TestWriterInjectsTraceContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	writer, err := outbox.NewWriter(b.Store, outbox.WriterConfig{Headers: outboxotel.NewInjector(b.Config)})
	require.NoError(t, err)

	member, err := baggage.NewMember("tenant", "acme")
	require.NoError(t, err)
	bag, err := baggage.New(member)
	require.NoError(t, err)
	ctx, span := b.Tracer.Start(baggage.ContextWithBaggage(t.Context(), bag), "request")
	var ids []string
	require.NoError(t, b.Store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		e := outbox.NewJSON("OrderCreated", []byte(`{"id":1}`))
		e.Headers = map[string]string{"x-user": "kept", "traceparent": "00-00000000000000000000000000000001-0000000000000001-01"}
		ids, err = writer.Write(ctx, tx, e, outbox.NewJSON("OrderPaid", []byte(`{"id":1}`)))
		return err
	}))
	span.End()

	creates := append(b.ended("create OrderCreated"), b.ended("create OrderPaid")...)
	require.Len(t, creates, 2)
	for i, id := range ids {
		ev, err := b.Store.Get(t.Context(), id)
		require.NoError(t, err)
		create := creates[i]
		require.Equal(t, trace.SpanKindProducer, create.SpanKind())
		require.Equal(t, span.SpanContext().SpanID(), create.Parent().SpanID(), "create is a child of the writer's span")
		a := attrs(create)
		require.Equal(t, "wmoutbox", a["messaging.system"].AsString())
		require.Equal(t, "create", a["messaging.operation.type"].AsString())
		require.Equal(t, ev.Topic, a["messaging.destination.name"].AsString())
		require.Equal(t, id, a["messaging.message.id"].AsString())

		got := b.Config.Propagator.Extract(context.Background(), propagation.MapCarrier(ev.Headers))
		sc := trace.SpanContextFromContext(got)
		require.Equal(t, span.SpanContext().TraceID(), sc.TraceID(), "the writer's trace, not the header the event carried")
		require.Equal(t, create.SpanContext().SpanID(), sc.SpanID())
		require.Equal(t, "acme", baggage.FromContext(got).Member("tenant").Value())
	}
	ev, err := b.Store.Get(t.Context(), ids[0])
	require.NoError(t, err)
	require.Equal(t, "kept", ev.Headers["x-user"])
}

// TestPublisherHotPathContinuesTrace: an event published through the
// Publisher and delivered by the hot path is processed in a CONSUMER span,
// child of its create span, in the writer's trace, and the handler runs
// in it.
func TestPublisherHotPathContinuesTrace(t *testing.T) {
	t.Parallel()
	testDelivery(t, true)
}

// TestPublisherColdPathContinuesTrace: the same through the claims.
func TestPublisherColdPathContinuesTrace(t *testing.T) {
	t.Parallel()
	testDelivery(t, false)
}

func testDelivery(t *testing.T, hot bool) {
	b := setup(t)
	inHandler := make(chan trace.SpanContext, 1)
	r := b.startRelay(t, watermilladapter.SubscriberConfig{}, hot, map[string]message.NoPublishHandlerFunc{
		"orders": func(msg *message.Message) error {
			inHandler <- trace.SpanContextFromContext(msg.Context())
			return nil
		},
	})
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"id":7}`))
	msg.Metadata.Set(watermilladapter.MetadataEventType, "OrderCreated")
	request := b.publish(t, r, "orders", msg)

	process := b.waitSpans(t, "process orders", 1)[0]
	create := b.ended("create orders")
	require.Len(t, create, 1)
	require.Equal(t, request.TraceID(), process.SpanContext().TraceID())
	require.Equal(t, create[0].SpanContext().SpanID(), process.Parent().SpanID(), "a child of the create span")
	require.True(t, process.Parent().IsRemote())
	require.Empty(t, process.Links())
	require.Equal(t, trace.SpanKindConsumer, process.SpanKind())
	require.Equal(t, codes.Unset, process.Status().Code)
	require.Equal(t, process.SpanContext().SpanID(), (<-inHandler).SpanID(), "the handler runs in the span")

	source := watermilladapter.SourceCold
	if hot {
		source = watermilladapter.SourceHot
	}
	a := attrs(process)
	id := attrs(create[0])["messaging.message.id"].AsString()
	require.NotEmpty(t, id)
	for k, want := range map[string]any{
		"messaging.system":            "wmoutbox",
		"messaging.operation.type":    "process",
		"messaging.operation.name":    "process",
		"messaging.destination.name":  "orders",
		"messaging.message.id":        id,
		"messaging.message.body.size": int64(8),
		"wmoutbox.attempt":            int64(1),
		"wmoutbox.source":             source,
		"wmoutbox.outcome":            "done",
		"wmoutbox.event_type":         "OrderCreated",
		"wmoutbox.handler":            "handle-orders",
	} {
		require.Equal(t, want, a[attributeKey(k)].AsInterface(), "attribute %s", k)
	}

	if !hot {
		claims := b.waitSpans(t, "outbox claim orders", 1)
		var claimed bool
		for _, c := range claims {
			ca := attrs(c)
			require.Equal(t, trace.SpanKindClient, c.SpanKind())
			require.Equal(t, "claim", ca["wmoutbox.operation"].AsString())
			require.Equal(t, int64(watermilladapter.DefaultBatchSize), ca["wmoutbox.events"].AsInt64())
			require.False(t, c.Parent().IsValid(), "a claim is a trace of its own")
			claimed = claimed || ca["wmoutbox.rows"].AsInt64() == 1
		}
		require.True(t, claimed, "a claim span with the event")
	}
	done := b.waitSpans(t, "outbox mark_done", 1)
	require.Equal(t, int64(1), attrs(done[0])["wmoutbox.events"].AsInt64())
	require.Equal(t, int64(1), attrs(done[0])["wmoutbox.rows"].AsInt64())
}

// TestOutcomes ends the consumer spans with the outcome the relay
// records: RETRY, then DEAD when the attempts are spent; DEAD at once for
// a Permanent error; deferred for RetryAfter; and the outcomes' statement
// is one span per batch.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	failing := errors.New("warehouse down")
	var deferred atomic.Bool
	r := b.startRelay(t, watermilladapter.SubscriberConfig{
		RetryPolicy: outbox.Backoff{Base: time.Millisecond, Max: time.Millisecond, MaxAttempts: 2},
	}, true, map[string]message.NoPublishHandlerFunc{
		"failing":   func(*message.Message) error { return failing },
		"permanent": func(*message.Message) error { return outbox.Permanent(failing) },
		"later": func(*message.Message) error {
			if deferred.Swap(true) {
				return nil
			}
			return outbox.RetryAfter(time.Millisecond, failing)
		},
	})
	for _, topic := range []string{"failing", "permanent", "later"} {
		b.publish(t, r, topic, message.NewMessage(watermill.NewUUID(), []byte("{}")))
	}

	spans := b.waitSpans(t, "process failing", 2)
	require.Len(t, spans, 2)
	for i, want := range []string{"retry", "dead"} {
		s := spans[i]
		a := attrs(s)
		require.Equal(t, int64(i+1), a["wmoutbox.attempt"].AsInt64())
		require.Equal(t, want, a["wmoutbox.outcome"].AsString())
		require.Equal(t, codes.Error, s.Status().Code)
		require.Equal(t, "warehouse down", s.Status().Description)
		require.Len(t, s.Events(), 1)
		require.Equal(t, "exception", s.Events()[0].Name)
		require.Equal(t, spans[0].Parent().SpanID(), s.Parent().SpanID(), "each attempt is a child of the create span")
	}
	permanent := b.waitSpans(t, "process permanent", 1)[0]
	require.Equal(t, "dead", attrs(permanent)["wmoutbox.outcome"].AsString())
	require.Equal(t, codes.Error, permanent.Status().Code)

	later := b.waitSpans(t, "process later", 2)
	require.Equal(t, "deferred", attrs(later[0])["wmoutbox.outcome"].AsString())
	require.Equal(t, codes.Unset, later[0].Status().Code, "asked for by the handler")
	require.Len(t, later[0].Events(), 1)
	require.Equal(t, "done", attrs(later[1])["wmoutbox.outcome"].AsString())
	require.Equal(t, int64(1), attrs(later[1])["wmoutbox.attempt"].AsInt64(), "no attempt spent")

	b.waitSpans(t, "outbox record_outcomes", 1)
	var events int64
	relaytest.Eventually(t, "four outcomes recorded", func() bool {
		events = 0
		for _, s := range b.ended("outbox record_outcomes") {
			events += attrs(s)["wmoutbox.events"].AsInt64()
		}
		return events >= 4 // retry, dead, dead, deferred
	})
	require.Less(t, len(b.ended("outbox record_outcomes")), 5, "a span per statement, not per event")
}

// TestMiddlewareOnOtherMessages continues the trace of a message no
// Subscriber delivered, and marks a failure as an error without an
// outcome.
func TestMiddlewareOnOtherMessages(t *testing.T) {
	t.Parallel()
	b := &bundle{}
	b.Spans, b.Config, b.Tracer = newRecorder(t)
	ctx, parent := b.Tracer.Start(t.Context(), "upstream")
	parent.End()
	msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
	b.Config.Propagator.Inject(ctx, propagation.MapCarrier(msg.Metadata))
	msg.SetContext(context.Background())
	h := outboxotel.Middleware(b.Config)(func(msg *message.Message) ([]*message.Message, error) {
		return nil, errors.New("boom")
	})
	_, err := h(msg)
	require.EqualError(t, err, "boom")
	s := b.ended("process")[0]
	require.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID())
	require.Equal(t, codes.Error, s.Status().Code)
	require.NotContains(t, attrs(s), attributeKey("wmoutbox.outcome"))

	require.Panics(t, func() {
		_, _ = outboxotel.Middleware(b.Config)(func(*message.Message) ([]*message.Message, error) { panic("oops") })(
			message.NewMessage(watermill.NewUUID(), nil))
	})
	require.Len(t, b.ended("process"), 2, "a panic ends the span")
	require.Equal(t, "panic: oops", b.ended("process")[1].Status().Description)
}

// TestWriterDeliveryContinuesTrace: an event written by an outbox.Writer
// with the relay's hot path is processed in a child of its create span.
func TestWriterDeliveryContinuesTrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.startRelay(t, watermilladapter.SubscriberConfig{}, true, map[string]message.NoPublishHandlerFunc{
		"OrderCreated": func(*message.Message) error { return nil },
	})
	writer, err := outbox.NewWriter(b.Store, outbox.WriterConfig{HotPath: r.Sub, Headers: outboxotel.NewInjector(b.Config)})
	require.NoError(t, err)
	ctx, span := b.Tracer.Start(t.Context(), "request")
	require.NoError(t, b.Store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, outbox.NewJSON("OrderCreated", []byte(`{"id":3}`)))
		return err
	}))
	span.End()

	process := b.waitSpans(t, "process OrderCreated", 1)[0]
	create := b.ended("create OrderCreated")
	require.Len(t, create, 1)
	require.Equal(t, span.SpanContext().TraceID(), process.SpanContext().TraceID())
	require.Equal(t, create[0].SpanContext().SpanID(), process.Parent().SpanID())
	require.Equal(t, "hot", attrs(process)["wmoutbox.source"].AsString())
}
