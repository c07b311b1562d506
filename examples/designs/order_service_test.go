package designs_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/forward"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outboxtest"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// docs/coming-from.md, "NEW / SENT / FAILED: an order service's outbox":
// 10 events per poll, 5 retries from 100 ms doubling to 1.6 s then FAILED
// (DEAD), FAILED → NEW by an admin tool, rows kept until a 30-day cleanup,
// and the operator queries of its last table.

// orderServiceConfig is the relay of their settings table.
func orderServiceConfig() watermilladapter.SubscriberConfig {
	return watermilladapter.SubscriberConfig{
		BatchSize:   10,
		RetryPolicy: outbox.Backoff{Base: 100 * time.Millisecond, Max: 1600 * time.Millisecond, MaxAttempts: 6, NoJitter: true},
	}
}

// orderService starts their relay, publishing to Kafka through
// forward.Handler ("publish to Kafka" in their settings table).
func orderService(t *testing.T, cfg watermilladapter.SubscriberConfig, kafka *broker) *relay {
	t.Helper()
	fwd, err := forward.Handler(forward.Config{Publisher: kafka})
	require.NoError(t, err)
	return startRelay(t, kafka.clock, cfg, map[string]message.NoPublishHandlerFunc{"orders": fwd})
}

// orderEvent is an event of their table: aggregate type "Order", the
// order's UUID as aggregate id, a JSON payload.
func orderEvent(t *testing.T, eventType outbox.EventType, orderID string) outbox.Envelope {
	t.Helper()
	return jsonEvent(t, eventType, "orders", "Order", orderID, map[string]string{"orderId": orderID})
}

func TestOrderServiceRetryScheduleFailedAndResend(t *testing.T) {
	t.Parallel()
	kafka := newBroker(outboxtest.NewClock(time.Now()), true)
	cfg := orderServiceConfig()
	r := orderService(t, cfg, kafka)

	// Their id is a UUID, used as eventId in the payload too.
	id := watermill.NewUUID()
	e, err := outbox.MarshalJSON("OrderCreated", map[string]string{"eventId": id, "orderId": watermill.NewUUID()})
	require.NoError(t, err)
	e.ID, e.Topic, e.AggregateType = id, "orders", "Order"
	require.Equal(t, []string{id}, r.write(t, e))

	// The first delivery and five retries after 100, 200, 400, 800 and
	// 1600 ms, then FAILED: DEAD, with last_error (their error_message).
	dead := r.requireSchedule(t, id, []time.Duration{
		100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, 1600 * time.Millisecond,
	}, kafka.publishes, errBrokerDown.Error())
	require.Equal(t, 6, dead.Attempts)
	require.True(t, dead.DoneAt.IsZero())

	// FAILED → NEW by the admin tool, and delivered at the next poll once
	// Kafka is back: SENT, that is DONE at done_at (their sent_at).
	kafka.setDown(false)
	n, err := r.store.ReplayDead(t.Context(), outbox.DeadFilter{IDs: []string{id}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	replayed := r.get(t, id)
	require.Equal(t, outbox.StatusNew, replayed.Status)
	require.Zero(t, replayed.Attempts)
	require.Equal(t, dead.LastError, replayed.LastError, "last_error kept as history")
	r.clock.Advance(watermilladapter.DefaultPollInterval)
	r.drain(t)
	sent := r.get(t, id)
	require.Equal(t, outbox.StatusDone, sent.Status)
	require.Equal(t, r.clock.Now(), sent.DoneAt)

	// Kafka got it once, with the id as the outbox_event_id header and in
	// the payload: consumers deduplicate by it.
	got := kafka.received()
	require.Len(t, got, 1)
	require.Equal(t, id, got[0].Metadata.Get(watermilladapter.MetadataEventID))
	var payload map[string]string
	require.NoError(t, json.Unmarshal(got[0].Payload, &payload))
	require.Equal(t, id, payload["eventId"])
}

// 10 events per poll: every claim takes at most 10, and a backlog of 25
// is delivered in claims of 10.
func TestOrderServiceTenEventsPerPoll(t *testing.T) {
	t.Parallel()
	kafka := newBroker(outboxtest.NewClock(time.Now()), false)
	cfg := orderServiceConfig()
	claims := &claimTracer{}
	cfg.Tracer = claims
	r := orderService(t, cfg, kafka)

	events := make([]outbox.Envelope, 25)
	for i := range events {
		events[i] = orderEvent(t, "OrderCreated", watermill.NewUUID())
	}
	ids := r.writeCold(t, events...)                      // in another instance: no hot path
	r.clock.Advance(watermilladapter.DefaultPollInterval) // their 5 s poll
	r.drain(t)
	for _, id := range ids {
		e := r.get(t, id)
		require.Equal(t, outbox.StatusDone, e.Status)
		require.False(t, e.DoneAt.IsZero())
	}
	limits, rows := claims.claims()
	var claimed, most int
	for i := range limits {
		require.Equal(t, 10, limits[i], "claim %d", i)
		claimed += rows[i]
		most = max(most, rows[i])
	}
	require.Equal(t, len(ids), claimed)
	require.Equal(t, 10, most)
	require.Len(t, kafka.received(), len(ids))
}

// The 30-day cleanup: Purge of DONE rows older than 30 days deletes those
// and keeps newer ones, and the FAILED (DEAD) ones for the admin tool.
func TestOrderServiceThirtyDayCleanup(t *testing.T) {
	t.Parallel()
	kafka := newBroker(outboxtest.NewClock(time.Now()), false)
	r := orderService(t, orderServiceConfig(), kafka)
	const day = 24 * time.Hour
	purgeDone := func() int64 {
		n, err := r.store.Purge(t.Context(), outbox.PurgeRequest{OlderThan: 30 * 24 * time.Hour, Statuses: []outbox.Status{outbox.StatusDone}})
		require.NoError(t, err)
		return n
	}

	old := r.write(t, orderEvent(t, "OrderCreated", watermill.NewUUID()))[0]
	r.drain(t)
	kafka.setDown(true)
	failed := r.write(t, orderEvent(t, "OrderCreated", watermill.NewUUID()))[0]
	r.untilDead(t, failed, 1600*time.Millisecond)
	kafka.setDown(false)
	sentAt := r.get(t, old).DoneAt

	r.clock.Advance(20 * day)
	recent := r.write(t, orderEvent(t, "OrderPaid", watermill.NewUUID()))[0]
	r.drain(t)

	r.clock.Set(sentAt.Add(30 * day))
	require.Zero(t, purgeDone(), "a row 30 days old is kept")
	r.clock.Advance(time.Microsecond)
	require.EqualValues(t, 1, purgeDone())
	_, err := r.store.Get(t.Context(), old)
	require.ErrorIs(t, err, outbox.ErrNotFound)
	require.Equal(t, outbox.StatusDone, r.get(t, recent).Status)
	require.Equal(t, outbox.StatusDead, r.get(t, failed).Status)

	// Without Statuses, Purge deletes the DEAD rows of that age too.
	r.clock.Set(r.get(t, failed).UpdatedAt.Add(30*day + time.Microsecond))
	n, err := r.store.Purge(t.Context(), outbox.PurgeRequest{OlderThan: 30 * 24 * time.Hour})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, err = r.store.Get(t.Context(), failed)
	require.ErrorIs(t, err, outbox.ErrNotFound)
	require.Equal(t, outbox.StatusDone, r.get(t, recent).Status)
}

// Their queries, as the page gives ours.
func TestOrderServiceQueries(t *testing.T) {
	t.Parallel()
	kafka := newBroker(outboxtest.NewClock(time.Now()), true)
	r := orderService(t, orderServiceConfig(), kafka)
	order1, order2 := watermill.NewUUID(), watermill.NewUUID()
	next := func() { r.clock.Advance(time.Millisecond) } // created_at apart

	cancelled := r.write(t, orderEvent(t, "OrderCancelled", order2))[0]
	r.untilDead(t, cancelled, 1600*time.Millisecond)
	kafka.setDown(false)
	next()
	created1 := r.write(t, orderEvent(t, "OrderCreated", order1))[0]
	next()
	created2 := r.write(t, orderEvent(t, "OrderCreated", order2))[0]
	r.drain(t)
	kafka.setDown(true)
	next()
	paid := r.write(t, orderEvent(t, "OrderPaid", order1))[0]
	r.drain(t) // RETRY, due in 100 ms
	next()
	shipped := orderEvent(t, "OrderShipped", order1)
	shipped.DeliverAfter = r.clock.Now().Add(time.Hour)
	shippedID := r.write(t, shipped)[0]

	require.Equal(t, []string{paid, shippedID},
		r.ids(t, `SELECT * FROM outbox_event WHERE status IN (0, 2) ORDER BY available_at LIMIT 10`))
	pending, oldest, err := r.store.Backlog(t.Context(), "orders")
	require.NoError(t, err)
	require.EqualValues(t, 2, pending)
	require.Equal(t, r.get(t, paid).AvailableAt, oldest)

	require.Equal(t, []string{cancelled}, r.ids(t, `SELECT * FROM outbox_event WHERE status = 3`))
	dead, err := r.store.QueryDead(t.Context(), outbox.DeadQuery{})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, cancelled, dead[0].ID)
	n, err := r.store.CountDead(t.Context(), outbox.DeadFilter{})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	byOrder := `SELECT * FROM outbox_event WHERE aggregate_type = 'Order' AND aggregate_id = $1 ORDER BY created_at`
	require.Equal(t, []string{created1, paid, shippedID}, r.ids(t, byOrder, order1))
	require.Equal(t, []string{cancelled, created2}, r.ids(t, byOrder, order2))
}
