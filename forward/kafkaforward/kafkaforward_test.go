package kafkaforward_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmoutbox/wmoutbox/forward"
	"github.com/wmoutbox/wmoutbox/forward/kafkaforward"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// newCluster starts an in-process Kafka broker (kfake) and returns its
// addresses.
func newCluster(t *testing.T) []string {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	return cluster.ListenAddrs()
}

// consume reads n records of topic from the beginning with franz-go's
// consumer, independent of Watermill.
func consume(t *testing.T, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
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
	var recs []*kgo.Record
	for len(recs) < n {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s in time", len(recs), n, topic)
		}
		require.NoError(t, fetches.Err())
		fetches.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
	}
	return recs
}

// uuidHeaderKey is the record header that holds the message UUID,
// watermill-kafka's uuidHeaderKey (the interop module,
// forward/kafkaforward/interop, reads the records with watermill-kafka).
const uuidHeaderKey = "_watermill_message_uuid"

func headers(r *kgo.Record) map[string]string {
	h := make(map[string]string, len(r.Headers))
	for _, kv := range r.Headers {
		h[kv.Key] = string(kv.Value)
	}
	return h
}

func TestRelayForwardsToKafkaKeyedByAggregate(t *testing.T) {
	t.Parallel()
	brokers := newCluster(t)
	pool := testdb.New(t)
	pub, err := kafkaforward.NewPublisher(brokers, kafkaforward.Config{ClientID: "test-relay"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, pub.Close()) })
	fwd, err := forward.Handler(forward.Config{Publisher: pub})
	require.NoError(t, err)
	const topic = "orders"
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{
		RetryPolicy: outbox.Backoff{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond},
	}, relaytest.Handlers{topic: fwd})

	// Four aggregates, five events each, written in five transactions
	// that each touch every aggregate; and two events with no aggregate.
	type sentEvent struct {
		msg       *message.Message
		aggregate string
		seq       int
	}
	var sent []sentEvent
	for seq := range 5 {
		var batch []*message.Message
		for a := range 4 {
			agg := fmt.Sprintf("order-%d", a)
			payload := fmt.Appendf(nil, "{\"order\": %q,  \"seq\": %d, \"raw\": \"\x00\xfe\"}", agg, seq)
			msg := message.NewMessage(watermill.NewUUID(), payload)
			msg.Metadata.Set(watermilladapter.MetadataEventType, "OrderUpdated")
			msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
			msg.Metadata.Set(watermilladapter.MetadataAggregateID, agg)
			msg.Metadata.Set(watermilladapter.MetadataTenantID, "tenant-1")
			msg.Metadata.Set("traceparent", fmt.Sprintf("00-%032d-%016d-01", seq, a))
			msg.Metadata.Set("x-seq", fmt.Sprint(seq))
			batch = append(batch, msg)
			sent = append(sent, sentEvent{msg, agg, seq})
		}
		r.Publish(t, topic, batch...)
	}
	for i := range 2 {
		msg := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, "global %d", i))
		r.Publish(t, topic, msg)
		sent = append(sent, sentEvent{msg, "", i})
	}

	relaytest.Eventually(t, "every row DONE", func() bool {
		var done, total int
		require.NoError(t, pool.QueryRow(t.Context(),
			`SELECT count(*) FILTER (WHERE status = 1), count(*) FROM outbox_event`).Scan(&done, &total))
		return total == len(sent) && done == total
	})
	recs := consume(t, brokers, topic, len(sent))
	require.Len(t, recs, len(sent), "no duplicates when nothing fails")

	byUUID := make(map[string]*kgo.Record, len(recs))
	for _, rec := range recs {
		byUUID[headers(rec)[uuidHeaderKey]] = rec
	}
	partitionOf := map[string]int32{}
	eventIDs := map[string]bool{}
	for _, s := range sent {
		rec, ok := byUUID[s.msg.UUID]
		require.True(t, ok, "message %s reached Kafka with its UUID", s.msg.UUID)
		h := headers(rec)
		id := h[watermilladapter.MetadataEventID]
		require.NotEmpty(t, id)
		eventIDs[id] = true
		require.Equal(t, []byte(s.msg.Payload), rec.Value, "payload byte for byte")
		if s.aggregate != "" {
			require.Equal(t, s.aggregate, string(rec.Key), "key = aggregate id")
			require.Equal(t, "OrderUpdated", h[watermilladapter.MetadataEventType])
			require.Equal(t, "Order", h[watermilladapter.MetadataAggregateType])
			require.Equal(t, s.aggregate, h[watermilladapter.MetadataAggregateID])
			require.Equal(t, "tenant-1", h[watermilladapter.MetadataTenantID])
			require.Equal(t, s.msg.Metadata.Get("traceparent"), h["traceparent"])
			require.Equal(t, fmt.Sprint(s.seq), h["x-seq"])
			if p, seen := partitionOf[s.aggregate]; seen {
				require.Equal(t, p, rec.Partition, "one aggregate, one partition")
			}
			partitionOf[s.aggregate] = rec.Partition
		} else {
			require.Equal(t, id, string(rec.Key), "no aggregate: key = event id")
			require.Equal(t, topic, h[watermilladapter.MetadataEventType], "event type defaults to the topic")
			require.Equal(t, string(outbox.GlobalAggregate), h[watermilladapter.MetadataAggregateType])
			require.NotContains(t, h, watermilladapter.MetadataAggregateID)
		}
		occurred, err := time.Parse(time.RFC3339Nano, h[watermilladapter.MetadataOccurredAt])
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), occurred, time.Minute)
		require.NotContains(t, h, watermilladapter.MetadataAttempt)
		require.NotContains(t, h, watermilladapter.MetadataSource)
	}
	require.Len(t, eventIDs, len(sent), "distinct event ids")
	rows, err := pool.Query(t.Context(), `SELECT event_id FROM outbox_event`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, id := range ids {
		require.True(t, eventIDs[id], "row %s forwarded with its event id", id)
	}
}

func TestPartitionKey(t *testing.T) {
	t.Parallel()
	msg := message.NewMessage("uuid-1", nil)
	key := func() string { k, err := kafkaforward.PartitionKey("t", msg); require.NoError(t, err); return k }
	require.Equal(t, "uuid-1", key(), "not from the outbox: the UUID")
	msg.Metadata.Set(watermilladapter.MetadataEventID, "01JEVENT")
	require.Equal(t, "01JEVENT", key())
	msg.Metadata.Set(watermilladapter.MetadataAggregateID, "order-1")
	require.Equal(t, "order-1", key())
}

func TestNewPublisherErrors(t *testing.T) {
	t.Parallel()
	_, err := kafkaforward.NewPublisher(nil, kafkaforward.Config{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	_, err = kafkaforward.NewPublisher([]string{"127.0.0.1:9"}, kafkaforward.Config{ConnectTimeout: -time.Second})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)

	// Options franz-go refuses: a transactional producer with idempotence
	// off.
	_, err = kafkaforward.NewPublisher([]string{"127.0.0.1:9"}, kafkaforward.Config{
		Options: []kgo.Opt{kgo.TransactionalID("relay"), kgo.DisableIdempotentWrite()},
	})
	require.ErrorContains(t, err, "kafkaforward")
	_, err = kafkaforward.NewPublisher([]string{"127.0.0.1:9"}, kafkaforward.Config{
		Options: []kgo.Opt{kgo.TransactionalID("relay")},
	})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)

	// Nothing listens on a port just released.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	start := time.Now()
	_, err = kafkaforward.NewPublisher([]string{addr}, kafkaforward.Config{ConnectTimeout: 500 * time.Millisecond})
	require.Error(t, err)
	require.ErrorContains(t, err, "kafkaforward: connect to")
	require.Less(t, time.Since(start), relaytest.WaitLimit, "bounded by ConnectTimeout")
}
