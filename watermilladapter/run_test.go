package watermilladapter_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// doneGate is a driver whose DONEs wait until open is closed.
type doneGate struct {
	*claimRecorder
	open chan struct{}
}

func (g *doneGate) MarkDone(ctx context.Context, p outboxdriver.MarkDoneParams) (int64, error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return g.claimRecorder.MarkDone(ctx, p)
}

// stepsOf writes, in one transaction, n events of the aggregate Order o-1
// on topic with the payloads {"step": 0} to {"step": n-1}, and returns
// their ids.
func stepsOf(t *testing.T, store *postgres.Store, topic string, n int) []string {
	t.Helper()
	events := make([]outbox.Envelope, n)
	for i := range events {
		events[i] = outbox.NewJSON("OrderCreated", fmt.Appendf(nil, `{"step": %d}`, i))
		events[i].Topic, events[i].AggregateType, events[i].AggregateID = topic, "Order", "o-1"
	}
	return writeCold(t, store, events...)
}

// An ordered relay claims a run of an aggregate's events at once and
// hands each to the handler as soon as the one before is acked, before
// any DONE is recorded.
func TestOrderedRunDeliversTheNextEventBeforeTheDoneIsRecorded(t *testing.T) {
	t.Parallel()
	store := committedSteps(t, nil, "OrderCreated", 5)
	gate := &doneGate{claimRecorder: &claimRecorder{Driver: store.Driver()}, open: make(chan struct{})}
	_, msgs := subscribe(t, storeOn(t, gate, nil), watermilladapter.SubscriberConfig{
		Ordered: true, WakeCooldown: time.Hour, PollInterval: time.Hour}, "OrderCreated")
	for i := range 5 {
		msg := nextMessage(t, msgs, fmt.Sprintf("event %d of the aggregate while no DONE is recorded", i))
		require.JSONEq(t, fmt.Sprintf(`{"step": %d}`, i), string(msg.Payload))
		msg.Ack()
	}
	claims := gate.recorded()
	require.Len(t, claims[0].rows, 5, "one claim took the run")
	close(gate.open)
	relaytest.Eventually(t, "the run's DONEs", func() bool {
		walks, named, _ := gate.walksAndNamed()
		return walks+named > len(claims) // the last DONE brings a claim of the aggregate
	})
}

// A Nack ends the run, however it fails the event: the events after it
// are released at once and wait for it; once it is retried (or replayed),
// the rest follow in order.
func TestOrderedNackEndsTheRunAndReleasesTheRest(t *testing.T) {
	t.Parallel()
	for name, fail := range map[string]error{
		"retry":            errors.New("broker down"),
		"retry after":      outbox.RetryAfter(time.Minute, errors.New("not yet")),
		"fail retry after": outbox.FailRetryAfter(time.Minute, errors.New("rate limited")),
		"dead":             outbox.Permanent(errors.New("poison")),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clock := clocktest.New(testStart)
			store, err := postgres.NewStore(testdb.New(t), postgres.Config{Clock: clock})
			require.NoError(t, err)
			ids := stepsOf(t, store, "orders", 4)
			// Polls every two minutes, past the retry's minute and within
			// the five-minute lease: the claim that the retry or the
			// replay's wake-up brings can, under load, pass over the
			// aggregate, which the next poll's walk then finds.
			sub, msgs := subscribe(t, store, watermilladapter.SubscriberConfig{Ordered: true, PollInterval: 2 * time.Minute, Clock: clock,
				RetryPolicy: outbox.Backoff{Base: time.Minute, NoJitter: true}}, "orders")
			nextMessage(t, msgs, "step 0").Ack()
			failed := nextMessage(t, msgs, "step 1")
			require.JSONEq(t, `{"step": 1}`, string(failed.Payload))
			watermilladapter.RecordError(failed, fail)
			failed.Nack()
			relaytest.AdvanceUntil(t, clock, watermilladapter.SettleLinger, "the outcome recorded and the rest released", func() bool {
				e := statusOf(t, store, ids[1])
				recorded := e.Status != outbox.StatusNew || e.AvailableAt.After(clock.Now()) // a deferral keeps NEW
				return recorded && e.LockedBy == "" &&
					statusOf(t, store, ids[2]).LockedBy == "" && statusOf(t, store, ids[3]).LockedBy == ""
			})
			noMessage(t, msgs, "the rest of the run waits for the failed event")
			if statusOf(t, store, ids[1]).Status == outbox.StatusDead {
				n, err := store.ReplayDead(t.Context(), outbox.DeadFilter{IDs: ids[1:2]})
				require.NoError(t, err)
				require.EqualValues(t, 1, n)
				sub.Wake("orders") // as a replay's caller, or a listener, tells the relays
			}
			clock.Advance(time.Minute)
			for i, step := range []int{1, 2, 3} {
				var msg *message.Message
				if i == 0 {
					msg = nextMessageOnClock(t, clock, 10*time.Second, msgs, "step 1 once it is due again")
				} else {
					msg = nextMessage(t, msgs, fmt.Sprint("delivery ", i, " once step 1 is due again"))
				}
				require.JSONEq(t, fmt.Sprintf(`{"step": %d}`, step), string(msg.Payload))
				msg.Ack()
			}
		})
	}
}

// Close releases the events of a run not handed out yet.
func TestOrderedCloseReleasesTheRestOfARun(t *testing.T) {
	t.Parallel()
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{})
	require.NoError(t, err)
	ids := stepsOf(t, store, "orders", 4)
	sub, msgs := subscribe(t, store, watermilladapter.SubscriberConfig{Ordered: true, PollInterval: time.Hour}, "orders")
	nextMessage(t, msgs, "step 0").Ack()
	require.NoError(t, sub.Close())
	require.Equal(t, outbox.StatusDone, statusOf(t, store, ids[0]).Status)
	for _, id := range ids[1:] {
		e := statusOf(t, store, id)
		require.Equal(t, outbox.StatusNew, e.Status)
		require.Empty(t, e.LockedBy, "released at Close")
	}
}

// Two relays never hold one aggregate: while one holds a run, the other's
// claims pass over the aggregate, whatever is left of the run.
func TestOrderedRunHoldsItsAggregateAgainstOtherRelays(t *testing.T) {
	t.Parallel()
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{})
	require.NoError(t, err)
	stepsOf(t, store, "orders", 3)
	_, firstMsgs := subscribe(t, store, watermilladapter.SubscriberConfig{Owner: "first", Ordered: true, OrderedRunLength: 2,
		PollInterval: time.Hour}, "orders")
	held := nextMessage(t, firstMsgs, "step 0")
	claims := &claimRecorder{Driver: store.Driver()}
	_, msgs := subscribe(t, storeOn(t, claims, nil), watermilladapter.SubscriberConfig{Owner: "second", Ordered: true,
		PollInterval: 20 * time.Millisecond}, "orders")
	relaytest.Eventually(t, "claims of the second relay", func() bool { return len(claims.recorded()) >= 3 })
	noMessage(t, msgs, "the second relay delivered while the first held the aggregate")
	held.Ack()
	nextMessage(t, firstMsgs, "step 1, the rest of the first relay's run").Ack()
	select { // by either relay, once the run's DONEs are recorded
	case msg := <-firstMsgs:
		require.JSONEq(t, `{"step": 2}`, string(msg.Payload))
		msg.Ack()
	case msg := <-msgs:
		require.JSONEq(t, `{"step": 2}`, string(msg.Payload))
		msg.Ack()
	case <-time.After(relaytest.WaitLimit):
		t.Fatal("step 2 was not delivered")
	}
}

// The events a relay holds, runs included, never exceed
// ColdQueueCapacity: a run longer than it acts as it.
func TestOrderedRunsFitTheColdQueue(t *testing.T) {
	t.Parallel()
	store := committedSteps(t, nil, "OrderCreated", 5)
	recorder, _, msgs := subscribeRecorded(t, store, watermilladapter.SubscriberConfig{ColdQueueCapacity: 3,
		PollInterval: time.Hour}, "OrderCreated")
	for i := range 5 {
		msg := nextMessage(t, msgs, fmt.Sprintf("event %d of the aggregate", i))
		require.JSONEq(t, fmt.Sprintf(`{"step": %d}`, i), string(msg.Payload))
		msg.Ack()
	}
	claims := recorder.recorded()
	require.Equal(t, 3, claims[0].params.RunLength, "OrderedRunLength's default, cut to the queue")
	for _, c := range claims {
		require.LessOrEqual(t, len(c.rows), 3, "no claim takes more than the queue holds")
	}
	require.Len(t, claims[0].rows, 3)
}
