package outboxotel_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/wmoutbox/wmoutbox/internal/testdb"
	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/outboxotel"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// A traced outbox: the Publisher writes the trace context into each
// event's headers, the relay's handler runs in a span that continues it,
// the relay's statements are spans, and its measurements are metrics.
func Example() {
	url, drop := testdb.ForExample()
	defer drop()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	// The application's OpenTelemetry set-up; here, spans kept in memory.
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(ctx) }()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() { _ = mp.Shutdown(ctx) }()

	// The outbox, traced: Config{} uses the global providers.
	metrics, err := outboxotel.NewMetrics(outboxotel.MetricsConfig{MeterProvider: mp})
	if err != nil {
		panic(err)
	}
	store, err := postgres.NewStore(pool, postgres.Config{})
	if err != nil {
		panic(err)
	}
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		Tracer:  outboxotel.NewRelayTracer(outboxotel.Config{}),
		Metrics: metrics,
	})
	if err != nil {
		panic(err)
	}
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{
		HotPath: sub,
		Headers: outboxotel.NewInjector(outboxotel.Config{}),
	})
	if err != nil {
		panic(err)
	}

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	router.AddMiddleware(outboxmw.RecordErrors, outboxotel.Middleware(outboxotel.Config{}))
	handled := make(chan trace.TraceID, 1)
	router.AddConsumerHandler("ship", "orders", sub, func(msg *message.Message) error {
		handled <- trace.SpanContextFromContext(msg.Context()).TraceID()
		return nil
	})
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	defer router.Close() // closes the subscriber too

	// A request writes an event in its transaction.
	reqCtx, request := otel.Tracer("shop").Start(ctx, "POST /orders")
	err = store.InTx(reqCtx, func(ctx context.Context, tx pgx.Tx) error {
		// ... the business change on tx ...
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{"id":42}`))
		msg.SetContext(ctx)
		return pub.Publish("orders", msg)
	})
	if err != nil {
		panic(err)
	}
	request.End()

	select {
	case id := <-handled:
		fmt.Println("the handler runs in the request's trace:", id == request.SpanContext().TraceID())
	case <-time.After(10 * time.Second):
		fmt.Println("not delivered")
		return
	}
	// Wait for the process span to end, then print the trace.
	var trail []sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(10 * time.Second); len(trail) < 3 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		trail = slices.DeleteFunc(spans.Ended(), func(s sdktrace.ReadOnlySpan) bool {
			return s.SpanContext().TraceID() != request.SpanContext().TraceID()
		})
	}
	slices.SortFunc(trail, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	for _, s := range trail {
		fmt.Printf("%s (%s)\n", s.Name(), s.SpanKind())
	}
	// Output:
	// the handler runs in the request's trace: true
	// POST /orders (internal)
	// create orders (producer)
	// process orders (consumer)
}
