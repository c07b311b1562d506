package amqpforward_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/forward"
	"github.com/wmoutbox/wmoutbox/forward/amqpforward"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testamqp"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// queueName is a queue name of this test alone, deleted at cleanup.
func queueName(t testing.TB, conn *amqp091.Connection) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "wmoutbox-test-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer ch.Close()
		_, err = ch.QueueDelete(name, false, false, false)
		require.NoError(t, err)
	})
	return name
}

func onlyEvent(t *testing.T, store *postgres.Store, pool *pgxpool.Pool) outbox.Event {
	t.Helper()
	var id string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT event_id FROM outbox_event`).Scan(&id))
	e, err := store.Get(t.Context(), id)
	require.NoError(t, err)
	return e
}

// consume reads n messages of queue with amqp091-go alone, acking them.
// It declares the queue as durable first, which RabbitMQ refuses
// (PRECONDITION_FAILED) if the forwarder made it otherwise.
func consume(t *testing.T, conn *amqp091.Connection, queue string, n int) []amqp091.Delivery {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	_, err = ch.QueueDeclare(queue, true, false, false, false, nil)
	require.NoError(t, err, "the queue is durable")
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	require.NoError(t, err)
	var got []amqp091.Delivery
	timeout := time.After(relaytest.WaitLimit)
	for len(got) < n {
		select {
		case d, ok := <-deliveries:
			require.True(t, ok, "consumer closed")
			require.NoError(t, d.Ack(false))
			got = append(got, d)
		case <-timeout:
			t.Fatalf("read %d of %d messages of %s in time", len(got), n, queue)
		}
	}
	return got
}

func TestRelayForwardsToRabbitMQ(t *testing.T) {
	t.Parallel()
	url, conn := testamqp.Broker(t)
	queue := queueName(t, conn)
	pool := testdb.New(t)
	pub, err := amqpforward.NewPublisher(url, amqpforward.Config{Queues: []string{queue}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	fwd, err := forward.Handler(forward.Config{Publisher: pub})
	require.NoError(t, err)
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, relaytest.Handlers{queue: fwd})

	sent := map[string]*message.Message{}
	for tx := range 3 {
		var batch []*message.Message
		for i := range 3 {
			payload := fmt.Appendf(nil, "{\"n\":  %d,\n\"raw\": \"\x00\xff\"}", tx*3+i)
			msg := message.NewMessage(watermill.NewUUID(), payload)
			msg.Metadata.Set(watermilladapter.MetadataEventType, "ParcelShipped")
			msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Parcel")
			msg.Metadata.Set(watermilladapter.MetadataAggregateID, fmt.Sprint("parcel-", i))
			msg.Metadata.Set(watermilladapter.MetadataTenantID, "tenant-9")
			msg.Metadata.Set("traceparent", fmt.Sprintf("00-%032d-%016d-01", tx, i))
			batch = append(batch, msg)
			sent[msg.UUID] = msg
		}
		r.Publish(t, queue, batch...)
	}
	// The queue exists before anyone consumes it: NewPublisher declared
	// it, and the events are waiting there.
	relaytest.Eventually(t, "every row DONE", func() bool {
		var done int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event WHERE status = 1`).Scan(&done))
		return done == len(sent)
	})

	deliveries := consume(t, conn, queue, len(sent))
	seen := map[string]bool{}
	for _, d := range deliveries {
		uuid, _ := d.Headers[amqp.DefaultMessageUUIDHeaderKey].(string)
		msg, ok := sent[uuid]
		require.True(t, ok, "delivery carries a sent message UUID: %v", d.Headers)
		require.False(t, seen[uuid], "no duplicates when nothing fails")
		seen[uuid] = true

		require.Equal(t, []byte(msg.Payload), d.Body, "payload byte for byte")
		require.Equal(t, amqp091.Persistent, d.DeliveryMode)
		eventID, _ := d.Headers[watermilladapter.MetadataEventID].(string)
		require.NotEmpty(t, eventID)
		require.Equal(t, eventID, d.MessageId, "AMQP message-id = outbox event id")
		require.Equal(t, "ParcelShipped", d.Type)
		for k, want := range map[string]string{
			watermilladapter.MetadataEventType:     "ParcelShipped",
			watermilladapter.MetadataAggregateType: "Parcel",
			watermilladapter.MetadataAggregateID:   msg.Metadata.Get(watermilladapter.MetadataAggregateID),
			watermilladapter.MetadataTenantID:      "tenant-9",
			"traceparent":                          msg.Metadata.Get("traceparent"),
		} {
			require.Equal(t, want, d.Headers[k], "header %s", k)
		}
		occurredAt, _ := d.Headers[watermilladapter.MetadataOccurredAt].(string)
		occurred, err := time.Parse(time.RFC3339Nano, occurredAt)
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), occurred, time.Minute)
		require.Equal(t, occurred.Unix(), d.Timestamp.Unix())
		require.NotContains(t, d.Headers, watermilladapter.MetadataAttempt)
		require.NotContains(t, d.Headers, watermilladapter.MetadataSource)

		e, err := r.Store.Get(t.Context(), eventID)
		require.NoError(t, err, "the event id is the outbox row's")
		require.Equal(t, outbox.StatusDone, e.Status)
	}
}

// freeAddr is a local address nothing listens on: a port just released.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func TestBrokerNotRunning(t *testing.T) {
	t.Parallel()
	url := "amqp://relay:s3cret-pw@" + freeAddr(t) + "/"

	_, err := amqpforward.NewPublisher(url, amqpforward.Config{Queues: []string{"orders"}})
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.ErrorContains(t, err, "amqpforward: connect to 127.0.0.1:")
	require.ErrorContains(t, err, "connection refused")
	require.NotContains(t, err.Error(), "s3cret-pw", "no credentials in errors")

	for _, bad := range []string{"http://relay:s3cret-pw@host/", "amqp://relay:s3cret-pw@host:port/", "amqp://relay:s3cret%zz-pw@host/"} {
		_, err = amqpforward.NewPublisher(bad, amqpforward.Config{})
		require.ErrorIs(t, err, outbox.ErrInvalidRequest)
		require.NotContains(t, err.Error(), "s3cret", "no credentials in errors")
	}
}

// A relay started while RabbitMQ is down keeps the events: each attempt
// fails with the connection error, recorded in last_error, and the event
// stays pending.
func TestBrokerNotRunningEventsStayPending(t *testing.T) {
	t.Parallel()
	url := "amqp://relay:s3cret-pw@" + freeAddr(t) + "/"
	pool := testdb.New(t)
	lazy := forward.Lazy(func() (message.Publisher, error) {
		return amqpforward.NewPublisher(url, amqpforward.Config{Queues: []string{"orders"}})
	})
	t.Cleanup(func() { require.NoError(t, lazy.Close()) })
	fwd, err := forward.Handler(forward.Config{Publisher: lazy})
	require.NoError(t, err)
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{
		RetryPolicy: outbox.Backoff{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond, MaxAttempts: 1000},
	}, relaytest.Handlers{"orders": fwd})
	r.Publish(t, "orders", message.NewMessage(watermill.NewUUID(), []byte(`{"order":1}`)))

	relaytest.Eventually(t, "a few failed attempts", func() bool { return onlyEvent(t, r.Store, pool).Attempts >= 3 })
	e := onlyEvent(t, r.Store, pool)
	require.Equal(t, outbox.StatusRetry, e.Status)
	require.Contains(t, e.LastError, "connection refused")
	require.Contains(t, e.LastError, "amqpforward: connect to 127.0.0.1:")
	require.Contains(t, e.LastError, "forward: publish event "+e.ID+" to orders")
	require.NotContains(t, e.LastError, "s3cret-pw")
}

func TestQueueDeclarationConflictFails(t *testing.T) {
	t.Parallel()
	url, conn := testamqp.Broker(t)
	queue := queueName(t, conn)
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(queue, false, false, false, false, nil) // not durable
	require.NoError(t, err)
	require.NoError(t, ch.Close())

	_, err = amqpforward.NewPublisher(url, amqpforward.Config{Queues: []string{queue}})
	var amqpErr *amqp091.Error
	require.ErrorAs(t, err, &amqpErr, "the broker's error")
	require.Equal(t, amqp091.PreconditionFailed, amqpErr.Code)
	require.ErrorContains(t, err, fmt.Sprintf("declare queue %q", queue))
}

func TestWatermillConfig(t *testing.T) {
	t.Parallel()
	c := amqpforward.WatermillConfig("amqp://guest:guest@127.0.0.1:5672/", amqpforward.Config{
		QueueArguments: amqp091.Table{"x-queue-type": "quorum"},
	})
	require.NoError(t, c.ValidatePublisher())
	require.NoError(t, c.ValidateSubscriber())
	require.True(t, c.Publish.ConfirmDelivery)
	require.True(t, c.Queue.Durable)
	require.Equal(t, "orders", c.Queue.GenerateName("orders"))
	require.Equal(t, "orders", c.Publish.GenerateRoutingKey("orders"))
	require.Empty(t, c.Exchange.GenerateName("orders"), "the default exchange")
	require.Equal(t, "quorum", c.Queue.Arguments["x-queue-type"])
}

// What AMQP cannot carry, or what watermill-amqp would overwrite, is
// refused before it reaches the connection, as a permanent error: the
// outbox counts characters where AMQP short strings count bytes, and
// amqp091-go fails an over-long one by closing the whole connection.
func TestMarshalerRefusesWhatAMQPCannotCarry(t *testing.T) {
	t.Parallel()
	m := amqpforward.WatermillConfig("amqp://127.0.0.1/", amqpforward.Config{}).Marshaler
	valid := func() *message.Message {
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
		msg.Metadata.Set(watermilladapter.MetadataEventType, strings.Repeat("订", 85)) // 255 bytes
		msg.Metadata.Set(strings.Repeat("k", 255), "v")
		return msg
	}
	_, err := m.Marshal(valid())
	require.NoError(t, err)
	for name, spoil := range map[string]func(*message.Message){
		"event type of 256 bytes": func(msg *message.Message) {
			msg.Metadata.Set(watermilladapter.MetadataEventType, strings.Repeat("订", 85)+"x")
		},
		"metadata key of 256 bytes": func(msg *message.Message) { msg.Metadata.Set(strings.Repeat("k", 256), "v") },
		"the UUID header":           func(msg *message.Message) { msg.Metadata.Set(amqp.DefaultMessageUUIDHeaderKey, "user value") },
		"a message id of 256 bytes": func(msg *message.Message) { msg.UUID = strings.Repeat("u", 256) },
		"a CC header":               func(msg *message.Message) { msg.Metadata.Set("CC", "billing@example.com") },
		"a BCC header":              func(msg *message.Message) { msg.Metadata.Set("BCC", "audit") },
	} {
		msg := valid()
		spoil(msg)
		_, err := m.Marshal(msg)
		require.Error(t, err, name)
		require.True(t, outbox.IsPermanent(err), name)
	}
}

// A quorum queue adds x-delivery-count, an integer, to a message it
// delivers again, and dead-lettering adds x-death: a Subscriber built from
// WatermillConfig reads such a message, instead of refusing it forever.
func TestSubscriberFromWatermillConfigReadsRedeliveries(t *testing.T) {
	t.Parallel()
	url, conn := testamqp.Broker(t)
	queue := queueName(t, conn)
	cfg := amqpforward.Config{Queues: []string{queue}, QueueArguments: amqp091.Table{"x-queue-type": "quorum"}}
	pub, err := amqpforward.NewPublisher(url, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	sent := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	require.NoError(t, pub.Publish(queue, sent))

	sub, err := amqp.NewSubscriber(amqpforward.WatermillConfig(url, cfg), watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	msgs, err := sub.Subscribe(t.Context(), queue)
	require.NoError(t, err)
	next := func() *message.Message {
		select {
		case msg := <-msgs:
			require.Equal(t, sent.UUID, msg.UUID)
			return msg
		case <-time.After(relaytest.WaitLimit):
			t.Fatal("not delivered")
			return nil
		}
	}
	next().Nack()
	again := next()
	require.Equal(t, "1", again.Metadata.Get("x-delivery-count"))
	again.Ack()
}

// publisherBesideMissingQueue is a publisher on channels channels that
// declares a queue of the test's own, the broker connection, that queue,
// and the name of a queue nobody declared.
func publisherBesideMissingQueue(t *testing.T, channels int) (_ *amqpforward.Publisher, _ *amqp091.Connection, queue, missing string) {
	t.Helper()
	url, conn := testamqp.Broker(t)
	queue, missing = queueName(t, conn), queueName(t, conn)
	pub, err := amqpforward.NewPublisher(url, amqpforward.Config{Queues: []string{queue}, Channels: channels})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	return pub, conn, queue, missing
}

// RabbitMQ confirms a message it routed to no queue and drops it: the
// publisher publishes mandatory, so the broker returns the message first,
// and Publish fails instead of reporting it delivered. The channel stays
// usable, and the return is not taken for the next message's.
func TestUnroutableMessageIsAnError(t *testing.T) {
	t.Parallel()
	pub, conn, queue, missing := publisherBesideMissingQueue(t, 1)

	err := pub.Publish(missing, message.NewMessage(watermill.NewUUID(), []byte(`{}`)))
	require.ErrorIs(t, err, amqpforward.ErrUnroutable)
	require.False(t, outbox.IsPermanent(err), "the queue may be declared later")
	require.ErrorContains(t, err, fmt.Sprintf("publish to queue %q on 127.0.0.1:5672", missing))
	require.ErrorContains(t, err, "NO_ROUTE")

	sent := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	require.NoError(t, pub.Publish(queue, sent))
	got := consume(t, conn, queue, 1)
	require.Equal(t, sent.UUID, got[0].Headers[amqp.DefaultMessageUUIDHeaderKey])
}

// Concurrent publishes, half of them to a queue that does not exist, on
// fewer channels than publishers: exactly those fail.
func TestUnroutableMessagesAmongConcurrentPublishes(t *testing.T) {
	t.Parallel()
	pub, conn, queue, missing := publisherBesideMissingQueue(t, 3)

	const n = 200
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		topic := queue
		if i%2 == 1 {
			topic = missing
		}
		wg.Go(func() { errs[i] = pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(`{}`))) })
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 1 {
			require.ErrorIs(t, err, amqpforward.ErrUnroutable, "publish %d", i)
		} else {
			require.NoError(t, err, "publish %d", i)
		}
	}
	consume(t, conn, queue, n/2)
}

// An event for a queue that does not exist stays in the outbox, retried
// with the reason in last_error, and is delivered once the queue exists.
func TestEventForAMissingQueueWaitsForIt(t *testing.T) {
	t.Parallel()
	url, conn := testamqp.Broker(t)
	queue := queueName(t, conn)
	pool := testdb.New(t)
	pub, err := amqpforward.NewPublisher(url, amqpforward.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	fwd, err := forward.Handler(forward.Config{Publisher: pub})
	require.NoError(t, err)
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{
		RetryPolicy: outbox.Backoff{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond, MaxAttempts: 1000},
	}, relaytest.Handlers{queue: fwd})
	sent := message.NewMessage(watermill.NewUUID(), []byte(`{"order":1}`))
	r.Publish(t, queue, sent)

	relaytest.Eventually(t, "a few failed attempts", func() bool { return onlyEvent(t, r.Store, pool).Attempts >= 2 })
	e := onlyEvent(t, r.Store, pool)
	require.Equal(t, outbox.StatusRetry, e.Status)
	require.Contains(t, e.LastError, "no queue took the message")

	got := consume(t, conn, queue, 1) // declares the queue
	require.Equal(t, sent.UUID, got[0].Headers[amqp.DefaultMessageUUIDHeaderKey])
	relaytest.Eventually(t, "DONE", func() bool { return onlyEvent(t, r.Store, pool).Status == outbox.StatusDone })
}

// AMQP carries a message's headers and properties in one frame, which
// RabbitMQ limits to its frame_max (128 KiB by default) by closing the
// whole connection. Headers that fill the frame exactly go through; a byte
// more is refused before anything is sent, as a permanent error, and the
// connection stays up for the other events.
func TestPublisherRefusesHeadersOverTheFrameSize(t *testing.T) {
	t.Parallel()
	url, conn := testamqp.Broker(t)
	queue := queueName(t, conn)
	pub, err := amqpforward.NewPublisher(url, amqpforward.Config{Queues: []string{queue}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	const frameMax = 131072 // RabbitMQ's default, which amqp091-go asks for
	marshaler := amqpforward.WatermillConfig(url, amqpforward.Config{}).Marshaler
	withTrace := func(n int) *message.Message {
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
		msg.Metadata.Set(watermilladapter.MetadataEventID, "01KAWZ8RS6YB1T6QH0R4F6Q2ZS")
		msg.Metadata.Set("trace", strings.Repeat("t", n))
		return msg
	}
	p, err := marshaler.Marshal(withTrace(0))
	require.NoError(t, err)
	fill := frameMax - amqpforward.HeaderFrameSize(p)

	require.NoError(t, pub.Publish(queue, withTrace(fill)), "headers that fill the frame")
	err = pub.Publish(queue, withTrace(0), withTrace(fill+1))
	require.True(t, outbox.IsPermanent(err), "a byte more: %v", err)
	require.NoError(t, pub.Publish(queue, withTrace(0)), "the next event")
	require.False(t, amqpforward.ConnectionLost(pub), "the connection stayed up")
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	require.Equal(t, 2, q.Messages, "the refused batch sent nothing")
}

func TestPublisherRefusesBadInput(t *testing.T) {
	t.Parallel()
	url, conn := testamqp.Broker(t)
	queue := queueName(t, conn)

	_, err := amqpforward.NewPublisher(url, amqpforward.Config{Channels: -1})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	// amqp091-go's recovery would keep a lost connection alive beside the
	// one the publisher dials again, and Close would not close it.
	_, err = amqpforward.NewPublisher(url, amqpforward.Config{Dial: &amqp091.Config{Recovery: &amqp091.Recovery{}}})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)

	pub, err := amqpforward.NewPublisher(url, amqpforward.Config{Queues: []string{queue}})
	require.NoError(t, err)
	msg := func() *message.Message { return message.NewMessage(watermill.NewUUID(), []byte(`{}`)) }
	err = pub.Publish(strings.Repeat("q", 256), msg())
	require.True(t, outbox.IsPermanent(err), "a routing key of 256 bytes: %v", err)
	spoilt := msg()
	spoilt.Metadata.Set(strings.Repeat("k", 256), "v")
	err = pub.Publish(queue, msg(), spoilt)
	require.True(t, outbox.IsPermanent(err), "a metadata key of 256 bytes: %v", err)
	require.NoError(t, pub.Publish(queue), "nothing to publish")

	require.NoError(t, pub.Close())
	require.ErrorIs(t, pub.Publish(queue, msg()), amqpforward.ErrClosed)
	require.NoError(t, pub.Close(), "twice")
	deliveries, err := conn.Channel()
	require.NoError(t, err)
	defer deliveries.Close()
	q, err := deliveries.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	require.Zero(t, q.Messages, "nothing of a refused batch was sent")
}
