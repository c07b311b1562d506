package outboxotel_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/outboxotel"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// bundle is a traced outbox on a database of its own: the spans end up
// in Spans.
type bundle struct {
	Pool   *pgxpool.Pool
	Store  *postgres.Store
	Spans  *tracetest.SpanRecorder
	Tracer trace.Tracer // the application's
	Config outboxotel.Config
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	b := &bundle{Pool: pool, Store: store}
	b.Spans, b.Config, b.Tracer = newRecorder(t)
	return b
}

// newRecorder returns a span recorder, a Config whose spans it records
// (W3C trace context and baggage), and the application's tracer.
func newRecorder(t *testing.T) (*tracetest.SpanRecorder, outboxotel.Config, trace.Tracer) {
	t.Helper()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	return spans, outboxotel.Config{
		TracerProvider: tp,
		Propagator:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}, tp.Tracer("app")
}

func attributeKey(k string) attribute.Key { return attribute.Key(k) }

// relay is a traced subscriber and a router running handlers behind
// RecordErrors and the tracing middleware.
type relay struct {
	Sub *watermilladapter.Subscriber
	Pub *watermilladapter.Publisher[pgx.Tx]
}

// startRelay starts a relay on b; hot gives the publisher the subscriber
// as its hot path, otherwise the claims deliver.
func (b *bundle) startRelay(t *testing.T, cfg watermilladapter.SubscriberConfig, hot bool, handlers map[string]message.NoPublishHandlerFunc) *relay {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	cfg.Tracer = outboxotel.NewRelayTracer(b.Config)
	sub, err := watermilladapter.NewSubscriber(b.Store, cfg)
	require.NoError(t, err)
	pcfg := watermilladapter.PublisherConfig{Headers: outboxotel.NewInjector(b.Config)}
	if hot {
		pcfg.HotPath = sub
	}
	pub, err := watermilladapter.NewPublisher(b.Store, pcfg)
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(outboxmw.RecordErrors, outboxotel.Middleware(b.Config))
	for topic, h := range handlers {
		router.AddConsumerHandler("handle-"+topic, topic, sub, h)
	}
	relaytest.RunRouter(t, router)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	return &relay{Sub: sub, Pub: pub}
}

// publish writes msg on topic in a committed transaction, under an
// application span "request", whose context it returns.
func (b *bundle) publish(t *testing.T, r *relay, topic string, msg *message.Message) trace.SpanContext {
	t.Helper()
	ctx, span := b.Tracer.Start(t.Context(), "request")
	defer span.End()
	require.NoError(t, b.Store.InTx(ctx, func(ctx context.Context, _ pgx.Tx) error {
		msg.SetContext(ctx)
		return r.Pub.Publish(topic, msg)
	}))
	return span.SpanContext()
}

// ended returns the ended spans named name.
func (b *bundle) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range b.Spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// waitSpans waits for n ended spans named name and returns them.
func (b *bundle) waitSpans(t *testing.T, name string, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	relaytest.Eventually(t, fmt.Sprintf("%d spans %q", n, name), func() bool { return len(b.ended(name)) >= n })
	return b.ended(name)
}

// attrs returns s's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// treeKeys are the attributes printTree shows, in this order.
var treeKeys = []attribute.Key{
	"messaging.system", "messaging.operation.type", "messaging.destination.name",
	"wmoutbox.attempt", "wmoutbox.source", "wmoutbox.outcome",
}

// tree renders the spans of trace id as a tree, children in start order:
// name, kind, and the key attributes; the ids are left out so that the
// output is stable.
func tree(spans []sdktrace.ReadOnlySpan, id trace.TraceID) string {
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	inTrace := map[trace.SpanID]bool{}
	for _, s := range spans {
		if s.SpanContext().TraceID() == id {
			inTrace[s.SpanContext().SpanID()] = true
		}
	}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.SpanContext().TraceID() != id {
			continue
		}
		if p := s.Parent().SpanID(); s.Parent().IsValid() && inTrace[p] {
			children[p] = append(children[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	var sb strings.Builder
	var walk func(s sdktrace.ReadOnlySpan, depth int)
	walk = func(s sdktrace.ReadOnlySpan, depth int) {
		fmt.Fprintf(&sb, "%s%s [%s]", strings.Repeat("  ", depth), s.Name(), s.SpanKind())
		a := attrs(s)
		for _, k := range treeKeys {
			if v, ok := a[k]; ok {
				fmt.Fprintf(&sb, " %s=%s", k, v.String())
			}
		}
		if s.Status().Code.String() != "Unset" {
			fmt.Fprintf(&sb, " status=%s", s.Status().Code)
		}
		sb.WriteString("\n")
		kids := children[s.SpanContext().SpanID()]
		slices.SortFunc(kids, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return sb.String()
}
