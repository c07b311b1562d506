package designs_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/forward"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outboxtest"
	"github.com/wmoutbox/wmoutbox/prommetrics"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// docs/coming-from.md, "pending / publishing / published / failed /
// dead_lettered: a chat backend": their states as ours, a worker every
// second, their dead-letter flow (inspect, resend, purge), the Prometheus
// metrics they planned, their operator queries, and their (topic,
// idempotency_key) uniqueness as our idempotency keys.

// chatConfig is the relay of their settings table. Their design leaves the
// backoff and the maximum open: these are ours to pick.
func chatConfig(metrics outbox.Metrics) watermilladapter.SubscriberConfig {
	return watermilladapter.SubscriberConfig{
		PollInterval: time.Second,
		RetryPolicy:  outbox.Backoff{Base: time.Second, Max: time.Minute, MaxAttempts: 3},
		Metrics:      metrics,
	}
}

// chatEvent is a message posted in a conversation, their key.
func chatEvent(t *testing.T, conversation, text string) outbox.Envelope {
	t.Helper()
	return jsonEvent(t, "MessagePosted", "chat.messages", "Conversation", conversation,
		map[string]string{"conversation": conversation, "text": text})
}

func TestChatStatesAndDeadLetterFlow(t *testing.T) {
	t.Parallel()
	// The queries compare with the database's now(): the relay's clock
	// runs two minutes behind it, so that what the relay made due is due
	// by now() as well, and its claims (5 minutes) still hold.
	kafka := newBroker(outboxtest.NewClock(time.Now().Add(-2*time.Minute)), true)
	reg := prometheus.NewRegistry()
	metrics, err := prommetrics.New(reg, prommetrics.Config{})
	require.NoError(t, err)
	fwd, err := forward.Handler(forward.Config{Publisher: kafka})
	require.NoError(t, err)
	// The broker holds each message until release is closed: the
	// events stay claimed meanwhile.
	held := make(chan struct{}, 2)
	release := make(chan struct{})
	r := startRelay(t, kafka.clock, chatConfig(metrics), map[string]message.NoPublishHandlerFunc{
		"chat.messages": func(msg *message.Message) error {
			select {
			case held <- struct{}{}:
			default: // released: nobody counts any more
			}
			<-release
			return fwd(msg)
		},
	})
	releaseAll := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseAll)

	// pending: NEW with no claim. Written after the worker's first look,
	// in another process (no hot path): the next tick takes them.
	require.True(t, r.clock.WaitForTimer(time.Second, waitLimit), "the worker waits for its next tick")
	ids := r.writeCold(t, chatEvent(t, "conv-1", "hello"), chatEvent(t, "conv-2", "hi"))
	resent, purged := ids[0], ids[1]
	for _, id := range ids {
		e := r.get(t, id)
		require.Equal(t, outbox.StatusNew, e.Status)
		require.Empty(t, e.LockedBy)
	}

	// publishing: a claim, on the worker's tick.
	r.clock.Advance(time.Second)
	for range ids {
		select {
		case <-held:
		case <-time.After(waitLimit):
			t.Fatal("the events were not claimed at the worker's tick")
		}
	}
	for _, id := range ids {
		e := r.get(t, id)
		require.Equal(t, outbox.StatusNew, e.Status)
		require.Equal(t, r.sub.Owner(), e.LockedBy)
		require.True(t, e.LockedUntil.After(r.clock.Now()))
	}
	require.ElementsMatch(t, ids,
		r.ids(t, `SELECT * FROM outbox_event WHERE status IN (0, 2) AND locked_until > now()`))

	// failed: RETRY, with the attempt counted, the error, and the next
	// attempt ahead; no claim.
	releaseAll()
	r.drain(t)
	for _, id := range ids {
		e := r.get(t, id)
		require.Equal(t, outbox.StatusRetry, e.Status)
		require.Equal(t, 1, e.Attempts)
		require.Contains(t, e.LastError, errBrokerDown.Error())
		require.True(t, e.AvailableAt.After(r.clock.Now()), "next attempt ahead")
		require.Empty(t, e.LockedBy)
	}
	requireSortedByAvailableAt(t, r, ids,
		r.ids(t, `SELECT * FROM outbox_event WHERE status IN (2, 3) ORDER BY available_at`))
	require.ElementsMatch(t, ids,
		r.ids(t, `SELECT * FROM outbox_event WHERE status = 2 AND available_at <= now()`))

	// dead_lettered: DEAD past the maximum.
	for _, id := range ids {
		e := r.untilDead(t, id, time.Minute)
		require.Equal(t, 3, e.Attempts)
		require.Contains(t, e.LastError, errBrokerDown.Error())
	}
	requireSortedByAvailableAt(t, r, ids,
		r.ids(t, `SELECT * FROM outbox_event WHERE status IN (2, 3) ORDER BY available_at`))

	// Inspect.
	dead, err := r.store.QueryDead(t.Context(), outbox.DeadQuery{Limit: 100})
	require.NoError(t, err)
	require.Len(t, dead, 2)
	for _, e := range dead {
		require.Contains(t, ids, e.ID)
		require.Contains(t, e.LastError, errBrokerDown.Error())
	}
	n, err := r.store.CountDead(t.Context(), outbox.DeadFilter{})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	groups, err := r.store.DeadGroups(t.Context(), outbox.DeadGroupQuery{})
	require.NoError(t, err)
	require.Len(t, groups, 1, "one reason: the broker")
	require.EqualValues(t, 2, groups[0].Count)
	require.Equal(t, []string{"chat.messages"}, groups[0].Topics)
	require.Contains(t, groups[0].SampleError, errBrokerDown.Error())

	// Resend: back to NEW, then published at the worker's next tick.
	kafka.setDown(false)
	n, err = r.store.ReplayDead(t.Context(), outbox.DeadFilter{IDs: []string{resent}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	e := r.get(t, resent)
	require.Equal(t, outbox.StatusNew, e.Status)
	require.Zero(t, e.Attempts)
	r.clock.Advance(time.Second)
	r.drain(t)
	e = r.get(t, resent)
	require.Equal(t, outbox.StatusDone, e.Status)
	require.Equal(t, r.clock.Now(), e.DoneAt)
	got := kafka.received()
	require.Len(t, got, 1)
	require.Equal(t, resent, got[0].Metadata.Get(watermilladapter.MetadataEventID))

	// Purge the dead-lettered one once it is a day old; the published one
	// stays.
	r.clock.Advance(24*time.Hour + time.Second)
	n, err = r.store.Purge(t.Context(), outbox.PurgeRequest{OlderThan: 24 * time.Hour, Statuses: []outbox.Status{outbox.StatusDead}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, err = r.store.Get(t.Context(), purged)
	require.ErrorIs(t, err, outbox.ErrNotFound)
	require.Equal(t, outbox.StatusDone, r.get(t, resent).Status)

	// The metrics they planned: success, failure, latency.
	requireMetric(t, reg, "outbox_delivered_total", 1)
	requireMetric(t, reg, "outbox_failures_total", 4)
	requireMetric(t, reg, "outbox_dead_total", 2)
	count, _ := histogram(t, reg, "outbox_delivery_latency_seconds")
	require.EqualValues(t, 1, count)
}

// Their (topic, idempotency_key) unique: a command retried by its caller
// stores its event once, and every try commits its business change. The
// retries come through each way the page names: Write, WriteDetailed, the
// Publisher's metadata key, and a writer that rejects duplicate keys.
func TestChatIdempotencyKey(t *testing.T) {
	t.Parallel()
	kafka := newBroker(outboxtest.NewClock(time.Now()), false)
	fwd, err := forward.Handler(forward.Config{Publisher: kafka})
	require.NoError(t, err)
	r := startRelay(t, kafka.clock, chatConfig(nil), map[string]message.NoPublishHandlerFunc{
		"chat.messages": fwd, "chat.receipts": fwd,
	})
	// Their business row: the message, stored once per request, and a
	// count of the transactions that committed it.
	_, err = r.pool.Exec(t.Context(), `CREATE TABLE chat_message (
		request_id text PRIMARY KEY, conversation text NOT NULL, body text NOT NULL, tries int NOT NULL DEFAULT 1)`)
	require.NoError(t, err)
	request := watermill.NewUUID()
	post := func(topic string, write func(context.Context, pgx.Tx, outbox.Envelope) error) {
		t.Helper()
		e := chatEvent(t, "conv-1", "hello")
		e.Topic, e.IdempotencyKey = topic, request
		require.NoError(t, r.store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			if err := write(ctx, tx, e); err != nil {
				return err
			}
			// After the event's write: fails if that aborted the transaction.
			_, err := tx.Exec(ctx, `INSERT INTO chat_message (request_id, conversation, body) VALUES ($1, 'conv-1', 'hello')
				ON CONFLICT (request_id) DO UPDATE SET tries = chat_message.tries + 1`, request)
			return err
		}))
	}

	var first string
	post("chat.messages", func(ctx context.Context, tx pgx.Tx, e outbox.Envelope) error {
		ids, err := r.writer.Write(ctx, tx, e)
		if err != nil {
			return err
		}
		first = ids[0]
		return nil
	})
	// The caller timed out and sends the request again.
	post("chat.messages", func(ctx context.Context, tx pgx.Tx, e outbox.Envelope) error {
		res, err := r.writer.WriteDetailed(ctx, tx, e)
		require.NoError(t, err)
		require.Equal(t, []string{first}, res.IDs, "the first try's event")
		require.Len(t, res.Skipped, 1)
		s := res.Skipped[0]
		require.Equal(t, 0, s.Index)
		require.NotEmpty(t, s.ID)
		require.NotEqual(t, first, s.ID)
		require.Equal(t, "chat.messages", s.Topic)
		require.Equal(t, request, s.IdempotencyKey)
		require.Equal(t, first, s.ExistingID)
		return nil
	})
	post("chat.messages", func(ctx context.Context, tx pgx.Tx, e outbox.Envelope) error {
		ids, err := r.writer.Write(ctx, tx, e)
		require.Equal(t, []string{first}, ids, "Write answers with the first try's event")
		return err
	})
	pub, err := watermilladapter.NewPublisher(r.store, watermilladapter.PublisherConfig{HotPath: r.sub})
	require.NoError(t, err)
	post("chat.messages", func(ctx context.Context, _ pgx.Tx, e outbox.Envelope) error {
		msg := message.NewMessage(watermill.NewUUID(), e.PayloadJSON)
		msg.Metadata.Set(watermilladapter.MetadataEventType, string(e.Type))
		msg.Metadata.Set(watermilladapter.MetadataIdempotencyKey, request)
		msg.SetContext(ctx)
		return pub.Publish(e.Topic, msg)
	})
	require.NoError(t, pub.Close())
	rejecting, err := outbox.NewWriter(r.store, outbox.WriterConfig{HotPath: r.sub, RejectDuplicateKeys: true})
	require.NoError(t, err)
	post("chat.messages", func(ctx context.Context, tx pgx.Tx, e outbox.Envelope) error {
		_, err := rejecting.Write(ctx, tx, e)
		require.ErrorIs(t, err, outbox.ErrDuplicateKey)
		var dup *outbox.DuplicateKeyError
		require.ErrorAs(t, err, &dup)
		require.Equal(t, first, dup.Events[0].ExistingID)
		return nil // a retry: commit the business change all the same
	})
	require.EqualValues(t, 5, r.count(t, `SELECT tries FROM chat_message WHERE request_id = $1`, request),
		"every try committed")
	require.Equal(t, []string{first},
		r.ids(t, `SELECT * FROM outbox_event WHERE topic = 'chat.messages' AND idempotency_key = $1`, request))

	// The same key on another topic is another event.
	var receipt string
	post("chat.receipts", func(ctx context.Context, tx pgx.Tx, e outbox.Envelope) error {
		res, err := r.writer.WriteDetailed(ctx, tx, e)
		require.NoError(t, err)
		require.Empty(t, res.Skipped)
		receipt = res.IDs[0]
		return nil
	})
	require.NotEqual(t, first, receipt)
	require.ElementsMatch(t, []string{first, receipt},
		r.ids(t, `SELECT * FROM outbox_event WHERE idempotency_key = $1`, request))

	// Delivered once, with its key, and not again at the worker's next tick.
	r.drain(t)
	r.clock.Advance(time.Second)
	r.drain(t)
	byEvent := map[string][]*message.Message{}
	for _, msg := range kafka.received() {
		id := msg.Metadata.Get(watermilladapter.MetadataEventID)
		byEvent[id] = append(byEvent[id], msg)
	}
	require.Len(t, byEvent, 2)
	require.Len(t, byEvent[first], 1, "the message, once")
	require.Len(t, byEvent[receipt], 1, "the receipt, once")
	require.Equal(t, request, byEvent[first][0].Metadata.Get(watermilladapter.MetadataIdempotencyKey))
	require.Equal(t, outbox.StatusDone, r.get(t, first).Status)
}

// requireSortedByAvailableAt checks that got holds the events ids, in the
// order of their available_at.
func requireSortedByAvailableAt(t *testing.T, r *relay, ids, got []string) {
	t.Helper()
	require.ElementsMatch(t, ids, got)
	require.True(t, slices.IsSortedFunc(got, func(a, b string) int {
		return r.get(t, a).AvailableAt.Compare(r.get(t, b).AvailableAt)
	}), "ordered by available_at")
}
