// Package outboxotel is OpenTelemetry for the outbox: trace context
// carried through the outbox's asynchronous hop, spans of the relay's
// deliveries and database statements, and the relay's metrics.
//
// It is a Go module of its own, github.com/wmoutbox/wmoutbox/outboxotel,
// so that the OpenTelemetry modules stay out of the builds of users who
// do not import it:
//
//	go get github.com/wmoutbox/wmoutbox/outboxotel
//
// It requires the version of github.com/wmoutbox/wmoutbox it was released
// with; keep the two at the same version.
//
// # Wiring
//
//	cfg := outboxotel.Config{} // the global TracerProvider and propagator
//	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
//		Tracer:  outboxotel.NewRelayTracer(cfg), // spans of claims and outcome statements
//		Metrics: metrics,                        // outboxotel.NewMetrics(outboxotel.MetricsConfig{})
//	})
//	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{
//		HotPath: sub,
//		Headers: outboxotel.NewInjector(cfg), // the trace context into the event's headers
//	})
//	// or: outbox.NewWriter(store, outbox.WriterConfig{Headers: outboxotel.NewInjector(cfg)})
//	router.AddMiddleware(outboxmw.RecordErrors, outboxotel.Middleware(cfg), middleware.Recoverer)
//
// The global propagator propagates nothing until the application sets
// one: otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(
// propagation.TraceContext{}, propagation.Baggage{})), or give
// Config.Propagator.
//
// # The trace of an event
//
//	POST /orders [internal]                    the request, in the application
//	  create orders [producer]                 Injector, as the event is written
//	    process orders [consumer]              Middleware, one per delivery attempt
//	      process shop.Order [consumer]        a consumer downstream of Kafka or RabbitMQ
//
// [Injector] starts a PRODUCER span "create <topic>" per event, a child of
// the writer's span, and writes its context (traceparent, tracestate) and
// the baggage into the event's headers. They are stored with the event and
// come back as message metadata on delivery, hot path or cold.
//
// [Middleware] starts a CONSUMER span "process <topic>" per delivery, a
// CHILD of the create span, not a new trace linked to it. The messaging
// conventions recommend links where one span processes a batch, or where
// the hop is so long that one trace would hold unrelated work; neither
// holds here: each delivery is one event, and what the outbox adds is a
// delay of milliseconds (a hot path) to a retry's backoff, which is worth
// seeing in the trace of the request that caused it. A child keeps the
// request, its event, every attempt to deliver it and the consumers
// downstream in one tree, which is what a trace viewer shows and what
// someone following an order needs. Each attempt is a sibling under the
// create span, with its attempt number.
//
// The middleware then replaces the trace headers of the message's
// metadata with the process span's, so that what the handler forwards
// (package forward copies metadata to Kafka record headers and AMQP
// headers) continues from this delivery: a consumer downstream extracts
// them with its own propagator and is a child of the relay's span, in the
// writer's trace.
//
// # Span attributes
//
// create and process spans:
//
//	messaging.system            "wmoutbox" (the outbox relay moves the event; its table is
//	                            not a broker the conventions name, and db.system belongs to
//	                            the statements)
//	messaging.operation.type    "create" / "process"
//	messaging.operation.name    "create" / "process"
//	messaging.destination.name  the outbox topic
//	messaging.message.id        the outbox event id
//	wmoutbox.event_type         the event type
//	wmoutbox.aggregate_type     the aggregate type
//
// process spans also carry messaging.message.body.size, wmoutbox.attempt
// (1 for the first), wmoutbox.source ("hot" or "cold"), wmoutbox.handler
// (the router handler's name), and once the handler returns,
// wmoutbox.outcome, read from watermilladapter.Outcome:
//
//	done      the event is DONE            status unset (instrumentation leaves Ok to users)
//	retry     it will be delivered again   the error recorded, status Error
//	dead      it is DEAD                   the error recorded, status Error
//	deferred  outbox.RetryAfter            the error recorded, status unset (asked for)
//
// A failed attempt has status Error though it will be retried: an attempt
// that failed is what a trace of a slow event has to show.
//
// # Relay spans
//
// [RelayTracer] makes a CLIENT span of each statement of the relay: "outbox
// claim <topic>" per claim, "outbox mark_done", "outbox record_outcomes"
// and "outbox release" per batched statement (one span per statement, not
// per event), with wmoutbox.operation, wmoutbox.events (the claim's limit
// or the batch's size) and wmoutbox.rows. They run on the relay's
// goroutines, outside any request: each is the root of a trace of its
// own, for spotting a slow database; sample them like other background
// work.
//
// # Metrics
//
// [Metrics] is an outbox.Metrics on the OpenTelemetry metric API with the
// series of package prommetrics, the same attributes (topic, queue,
// outcome, operation, kind, slot) and units; an OpenTelemetry Prometheus
// exporter turns the names back into prommetrics' (dots to underscores,
// _total on counters, _seconds for unit s, _bytes for unit By):
//
//	outbox.hot_enqueued            counter {event}       outbox_hot_enqueued_total
//	outbox.hot_dropped             counter {event}       outbox_hot_dropped_total
//	outbox.cold_enqueued           counter {event}       outbox_cold_enqueued_total
//	outbox.delivered               counter {event}       outbox_delivered_total
//	outbox.failures                counter {event}       outbox_failures_total
//	outbox.dead                    counter {event}       outbox_dead_total
//	outbox.queue_depth             updowncounter {event} outbox_queue_depth{queue}
//	outbox.pending_events          gauge {event}         outbox_pending_events
//	outbox.oldest_pending_age      gauge s               outbox_oldest_pending_age_seconds
//	outbox.dead_events             gauge {event}         outbox_dead_events
//	outbox.delivery_latency        histogram s           outbox_delivery_latency_seconds
//	outbox.handler_duration        histogram s           outbox_handler_duration_seconds{outcome}
//	outbox.store_errors            counter {error}       outbox_store_errors_total{operation}
//	outbox.purged_rows             counter {row}         outbox_purged_rows_total{kind}
//	outbox.unserved_events         gauge {event}         outbox_unserved_events{topic}
//	outbox.log_slot_lag            gauge By              outbox_log_slot_lag_bytes{slot}
//	outbox.log_slot_confirmed_age  gauge s               outbox_log_slot_confirmed_age_seconds{slot}
//
// # Concurrency
//
// Everything this package returns is safe for concurrent use. A nil
// TracerProvider, Propagator or MeterProvider means the global one, read
// when the value is made (the global providers delegate to those set
// later).
package outboxotel
