//go:build faults

package faults

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmoutbox/wmoutbox/forward"
	"github.com/wmoutbox/wmoutbox/forward/amqpforward"
	"github.com/wmoutbox/wmoutbox/forward/kafkaforward"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testamqp"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/internal/testenv"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// kafkaOutage is how long the Kafka broker stays down.
const kafkaOutage = 30 * time.Second

// outageRetry is the relays' retry policy in the broker scenarios. Its
// budget outlasts the outage by far: even with the lowest jitter, the
// delays before an event goes DEAD add up to 0.5 × (0.5 + 1 + 2 + 4 + 25 × 5)
// s ≈ 66 s, and each failed attempt also spends the producer's own retries.
// The 5 s cap keeps the wait after the broker is back short.
var outageRetry = outbox.Backoff{Base: 500 * time.Millisecond, Max: 5 * time.Second, MaxAttempts: 30}

// TestKafkaBrokerOutage stops the Kafka broker for 30 s while writers
// write and the relay forwards, then starts it again on the same port with
// the same data. Events wait and retry with backoff, none goes DEAD, and
// after the recovery every committed event is in Kafka.
func TestKafkaBrokerOutage(t *testing.T) {
	t.Parallel()
	const topic = "kafka-outage"
	addr, port := freePort(t)
	dataDir := t.TempDir()
	startBroker := func() *kfake.Cluster {
		// The same port and data directory: the broker restarts, as a real
		// one would, with what it had stored.
		c, err := kfake.NewCluster(kfake.Ports(port), kfake.DataDir(dataDir),
			kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3))
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}
	broker := startBroker()
	brokers := []string{addr}

	pool := testdb.New(t)
	l := newLedger(t, pool, "kafka")
	kafkaPub, err := kafkaforward.NewPublisher(brokers, kafkaforward.Config{ClientID: "faults-relay"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, kafkaPub.Close()) })
	fwd, err := forward.Handler(forward.Config{Publisher: kafkaPub})
	require.NoError(t, err)
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{
		RetryPolicy: outageRetry,
		// Longer than one publish attempt with the producer's retries.
		LockTimeout: time.Minute,
	}, relaytest.Handlers{topic: fwd})

	ws := startWriters(t, l, writerConfig{
		writers: 1, batch: 4, randomBatch: true, pause: 40 * time.Millisecond, rollbackEvery: 10,
		write: writeWithPublisher(r.Store, r.Pub, topic, nil),
	})
	waitFor(t, "forwarding before the outage", 30*time.Second, func() (bool, string) {
		st, err := outboxState(t.Context(), pool)
		return err == nil && st.done >= 50, fmt.Sprint(st, err)
	})

	broker.Close()
	stopped := time.Now()
	// While the broker is down, events fail and are scheduled again.
	waitFor(t, "failed attempts during the outage", kafkaOutage, func() (bool, string) {
		var retrying int
		err := pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event WHERE status = 2 AND last_error <> ''`).Scan(&retrying)
		return err == nil && retrying > 0, fmt.Sprint(retrying, err)
	})
	time.Sleep(time.Until(stopped.Add(kafkaOutage))) // the fault: the broker stays down 30 s
	var during tableState
	during, err = outboxState(t.Context(), pool)
	require.NoError(t, err)
	var sampleError string
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT last_error FROM outbox_event WHERE status = 2 AND last_error <> '' LIMIT 1`).Scan(&sampleError))
	startBroker()

	// Writes go on after the recovery, then stop.
	before := ws.commits.Load()
	waitFor(t, "writes after the recovery", 30*time.Second, func() (bool, string) {
		return ws.commits.Load() >= before+10, ws.String()
	})
	ws.stop()
	waitFor(t, "every row DONE", 60*time.Second, func() (bool, string) {
		st, err := outboxState(t.Context(), pool)
		return err == nil && st.pending == 0 && st.claimed == 0, fmt.Sprint(st, err)
	})

	// What reached Kafka, read by an independent client.
	for _, id := range kafkaEventIDs(t, brokers, topic) {
		l.deliver(id, "")
	}
	f, err := l.count(t.Context())
	require.NoError(t, err)
	st, err := outboxState(t.Context(), pool)
	require.NoError(t, err)
	var maxAttempts int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT coalesce(max(attempts), 0) FROM outbox_event`).Scan(&maxAttempts))
	l.report(t, f, 1, 1, fmt.Sprintf("outage=%s pending_during_outage=%d max_attempts=%d dead=%d",
		kafkaOutage, during.pending, maxAttempts, st.dead))
	t.Logf("an attempt during the outage failed with: %s", sampleError)

	require.Zero(t, st.dead, "nothing DEAD for an outage shorter than the retry budget")
	require.Zero(t, f.lost, "lost")
	require.Zero(t, f.phantom, "in Kafka but never committed")
	require.Equal(t, f.events, st.done, "every committed event DONE: %s", st)
	require.Equal(t, f.events, st.total, "no row from a rolled-back transaction: %s", st)
	require.Positive(t, maxAttempts, "events were retried")
}

// freePort returns a local address nothing listens on: a port just
// released, for a broker that must come back on the same one.
func freePort(t *testing.T) (string, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().(*net.TCPAddr)
	require.NoError(t, ln.Close())
	return addr.String(), addr.Port
}

// kafkaEventIDs reads every record of topic with franz-go's consumer and
// returns their outbox event ids (duplicates included). How many records
// there are comes from the partitions' end offsets as Sarama reads them, a
// client that shares no code with the relay's franz-go producer.
func kafkaEventIDs(t *testing.T, brokers []string, topic string) []string {
	t.Helper()
	want := kafkaRecordCount(t, brokers, topic)
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond),
	)
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), relaytest.WaitLimit)
	defer cancel()
	var ids []string
	for int64(len(ids)) < want {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s in time", len(ids), want, topic)
		}
		require.NoError(t, fetches.Err())
		fetches.EachRecord(func(r *kgo.Record) {
			id := ""
			for _, h := range r.Headers {
				if h.Key == watermilladapter.MetadataEventID {
					id = string(h.Value)
				}
			}
			ids = append(ids, id)
		})
	}
	return ids
}

// kafkaRecordCount sums the end offsets of topic's partitions.
func kafkaRecordCount(t *testing.T, brokers []string, topic string) int64 {
	t.Helper()
	client, err := sarama.NewClient(brokers, sarama.NewConfig())
	require.NoError(t, err)
	defer client.Close()
	partitions, err := client.Partitions(topic)
	require.NoError(t, err)
	var n int64
	for _, p := range partitions {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		require.NoError(t, err)
		n += end
	}
	return n
}

// amqpCuts is how often the broker closes the relay's connection.
const amqpCuts = 5

// TestRabbitMQConnectionCut has RabbitMQ close the relay's connection
// (rabbitmqctl close_connection) five times while writers write and the
// relay forwards. The publisher dials again on the next publish; the
// events whose publish failed are retried with backoff, none goes DEAD,
// and every committed event ends up in the queue. Duplicates are
// publishes the broker took but could not confirm before the connection
// went.
func TestRabbitMQConnectionCut(t *testing.T) {
	t.Parallel()
	url, conn := testamqp.Broker(t)
	rabbitmqctl := lookPathOrSkip(t, "rabbitmqctl")
	queue := amqpQueue(t, conn)
	// The connection is found by this name among the broker's.
	connName := "wmoutbox-faults-" + queue

	pool := testdb.New(t)
	l := newLedger(t, pool, "amqp")
	amqpPub, err := amqpforward.NewPublisher(url, amqpforward.Config{
		Queues: []string{queue},
		Dial:   &amqp091.Config{Properties: amqp091.Table{"connection_name": connName}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, amqpPub.Close()) })
	fwd, err := forward.Handler(forward.Config{Publisher: amqpPub})
	require.NoError(t, err)
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{
		RetryPolicy: outageRetry,
		LockTimeout: time.Minute,
	}, relaytest.Handlers{queue: fwd})

	ws := startWriters(t, l, writerConfig{
		writers: 2, batch: 4, randomBatch: true, pause: 10 * time.Millisecond, rollbackEvery: 10,
		write: writeWithPublisher(r.Store, r.Pub, queue, nil),
	})
	for range amqpCuts {
		// Under load, and once the previous cut has been recovered from:
		// events are being confirmed again.
		st, err := outboxState(t.Context(), pool)
		require.NoError(t, err)
		waitFor(t, "forwarding between cuts", 60*time.Second, func() (bool, string) {
			now, err := outboxState(t.Context(), pool)
			return err == nil && now.done >= st.done+100, fmt.Sprint(now, err)
		})
		var pid string
		waitFor(t, "the relay's connection listed by the broker", 30*time.Second, func() (bool, string) {
			pid = amqpConnectionPID(t, rabbitmqctl, connName)
			return pid != "", "not listed"
		})
		out, err := exec.Command(rabbitmqctl, "close_connection", pid, "wmoutbox fault test").CombinedOutput()
		require.NoError(t, err, "rabbitmqctl close_connection: %s", out)
	}
	before := ws.commits.Load()
	waitFor(t, "writes after the last cut", 30*time.Second, func() (bool, string) {
		return ws.commits.Load() >= before+10, ws.String()
	})
	ws.stop()
	waitFor(t, "every row DONE", 60*time.Second, func() (bool, string) {
		st, err := outboxState(t.Context(), pool)
		return err == nil && st.pending == 0 && st.claimed == 0, fmt.Sprint(st, err)
	})

	for _, id := range amqpEventIDs(t, conn, queue) {
		l.deliver(id, "")
	}
	f, err := l.count(t.Context())
	require.NoError(t, err)
	st, err := outboxState(t.Context(), pool)
	require.NoError(t, err)
	var retried int
	var sampleError string
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT count(*) FILTER (WHERE attempts > 0), coalesce(max(last_error), '') FROM outbox_event`).Scan(&retried, &sampleError))
	l.report(t, f, 1, amqpCuts, fmt.Sprintf("retried_events=%d dead=%d", retried, st.dead))
	if sampleError != "" {
		t.Logf("a failed attempt: %s", sampleError)
	}

	require.Zero(t, st.dead, "nothing DEAD for a connection cut")
	require.Zero(t, f.lost, "lost")
	require.Zero(t, f.phantom, "in the queue but never committed")
	require.Equal(t, f.events, st.done, "every committed event DONE: %s", st)
	require.Equal(t, f.events, st.total, "no row from a rolled-back transaction: %s", st)
}

// lookPathOrSkip finds a command the scenario needs.
func lookPathOrSkip(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		testenv.SkipOrFail(t, "%s not found: %v", name, err)
	}
	return path
}

// amqpQueue is a durable queue of this test alone, deleted at cleanup.
func amqpQueue(t *testing.T, conn *amqp091.Connection) string {
	t.Helper()
	name := "wmoutbox-faults-" + strings.ToLower(outbox.NewID())
	t.Cleanup(func() {
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer ch.Close()
		_, err = ch.QueueDelete(name, false, false, false)
		require.NoError(t, err)
	})
	return name
}

// amqpConnectionPID returns the broker's id of the connection named name,
// or "" when it has none (the client is reconnecting).
func amqpConnectionPID(t *testing.T, rabbitmqctl, name string) string {
	t.Helper()
	out, err := exec.Command(rabbitmqctl, "list_connections", "-q", "--no-table-headers", "pid", "client_properties").CombinedOutput()
	require.NoError(t, err, "rabbitmqctl list_connections: %s", out)
	for line := range strings.Lines(string(out)) {
		pid, props, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if ok && strings.Contains(props, `{"connection_name","`+name+`"}`) {
			return pid
		}
	}
	return ""
}

// amqpEventIDs reads every message of queue with amqp091-go alone and
// returns their outbox event ids (duplicates included).
func amqpEventIDs(t *testing.T, conn *amqp091.Connection, queue string) []string {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	require.NoError(t, err)
	ids := make([]string, 0, q.Messages)
	timeout := time.After(relaytest.WaitLimit)
	for len(ids) < q.Messages {
		select {
		case d, ok := <-deliveries:
			require.True(t, ok, "consumer closed")
			require.NoError(t, d.Ack(false))
			id, _ := d.Headers[watermilladapter.MetadataEventID].(string)
			ids = append(ids, id)
		case <-timeout:
			t.Fatalf("read %d of %d messages of %s in time", len(ids), q.Messages, queue)
		}
	}
	return ids
}
