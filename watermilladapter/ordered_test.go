package watermilladapter_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/logtest"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// Ordered delivery: the events of an aggregate one at a time, in the
// order written, claimed by name when this relay knows which aggregate
// moved, and by a walk of the topic otherwise.

// Ordered: the events of each aggregate reach the handler one at a time
// and in write order, through retries, while different aggregates run in
// parallel. Nothing polls (PollInterval is an hour): commits and acks must
// wake the claims themselves.
func TestOrderedDeliveryKeepsEachAggregatesOrder(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	const aggregates, perAggregate = 5, 20
	var mu sync.Mutex
	inFlight := map[string]int{}
	got := map[string][]int{}
	tries := map[string]int{}
	var total, mostInFlight int
	var overlaps []string
	done := make(chan struct{})
	// The first handler holds its event until another aggregate's is in a
	// handler too: they are delivered in parallel.
	parallel, sawParallel, waited := make(chan struct{}), false, false
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{Ordered: true, WorkerCount: 8, PollInterval: time.Hour},
		relaytest.Handlers{"orders": func(msg *message.Message) error {
			aggregate := msg.Metadata.Get(watermilladapter.MetadataAggregateID)
			mu.Lock()
			inFlight[aggregate]++
			total++
			mostInFlight = max(mostInFlight, total)
			if total > 1 && !sawParallel {
				sawParallel = true
				close(parallel)
			}
			if inFlight[aggregate] > 1 {
				overlaps = append(overlaps, aggregate)
			}
			tries[msg.UUID]++
			fail := tries[msg.UUID] == 1 && len(got[aggregate])%3 == 1
			wait := !waited
			waited = true
			mu.Unlock()
			if wait {
				select {
				case <-parallel:
				case <-time.After(relaytest.WaitLimit):
				}
			}
			for range 10 { // in the handler a while: another event of the aggregate would overlap
				runtime.Gosched()
			}
			mu.Lock()
			defer mu.Unlock()
			inFlight[aggregate]--
			total--
			if fail {
				return outbox.RetryAfter(time.Millisecond, errors.New("not yet"))
			}
			n, err := strconv.Atoi(string(msg.Payload))
			if err != nil {
				n = -1
			}
			got[aggregate] = append(got[aggregate], n)
			if len(got[aggregate]) == perAggregate && len(got) == aggregates && allOf(got, perAggregate) {
				close(done)
			}
			return nil
		}})
	for i := range perAggregate {
		for a := range aggregates {
			msg := newMsg(strconv.Itoa(i))
			msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
			msg.Metadata.Set(watermilladapter.MetadataAggregateID, strconv.Itoa(a))
			r.Publish(t, "orders", msg)
		}
	}
	select {
	case <-done:
	case <-time.After(relaytest.WaitLimit):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("delivered %v before the time limit", got)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, overlaps, "events of one aggregate in the handler at once")
	inOrder := make([]int, perAggregate)
	for i := range inOrder {
		inOrder[i] = i
	}
	for a, seq := range got {
		require.Equal(t, inOrder, seq, "aggregate %s", a)
	}
	require.Greater(t, mostInFlight, 1, "different aggregates are delivered in parallel")
}

// allOf reports whether every aggregate of got has n events.
func allOf(got map[string][]int, n int) bool {
	for _, seq := range got {
		if len(seq) != n {
			return false
		}
	}
	return true
}

// The next event of an ordered aggregate is claimed as soon as the DONE
// before it is recorded, not after WakeCooldown, which is there to merge
// other processes' commit announcements: here, a cooldown and a poll of
// an hour each.
func TestOrderedAggregateIsNotHeldByTheWakeCooldown(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(testStart)
	_, msgs := subscribeColdly(t, committedSteps(t, clock, "OrderCreated", 5), clock)
	for i := range 5 {
		msg := nextMessage(t, msgs, fmt.Sprintf("event %d of the aggregate", i))
		require.JSONEq(t, fmt.Sprintf(`{"step": %d}`, i), string(msg.Payload))
		msg.Ack()
	}
}

// A DEAD ordered event holds back its aggregate: its log line says so,
// with the aggregate, so that an operator knows a replay or a purge is
// awaited. An unordered relay's does not.
func TestDeadOrderedEventSaysItHoldsBackItsAggregate(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprint("ordered=", ordered), func(t *testing.T) {
			t.Parallel()
			pool := testdb.New(t)
			logger, captured := logtest.New()
			r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{Ordered: ordered, Logger: logger},
				relaytest.Handlers{"orders": func(*message.Message) error { return outbox.Permanent(errors.New("poison")) }})
			msg := newMsg("x")
			msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
			msg.Metadata.Set(watermilladapter.MetadataAggregateID, "o-9")
			r.Publish(t, "orders", msg)
			id := onlyEventID(t, pool)
			relaytest.Eventually(t, "DEAD", func() bool { return statusOf(t, r.Store, id).Status == outbox.StatusDead })
			dead := captured.Find(slog.LevelError, "outbox: event is DEAD")
			require.Len(t, dead, 1)
			if ordered {
				require.Equal(t, true, dead[0].Attrs["holds_back_aggregate"])
				require.Equal(t, "o-9", dead[0].Attrs["aggregate_id"])
			} else {
				require.NotContains(t, dead[0].Attrs, "holds_back_aggregate")
			}
		})
	}
}

// An ordered relay that closes while a handler still holds the first
// event of an aggregate (a rolling deploy, a handler slower than
// DrainTimeout) must not let the aggregate go on: Close gives up on the
// handler, but the handler may still be forwarding the event. Another
// relay must not deliver the next event of that aggregate while the first
// is in a handler and its lease (an hour here) has not run out.
func TestOrderedCloseDoesNotLetTheAggregateOvertakeAHandlerItGaveUpOn(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(testStart)
	store := committedSteps(t, clock, "orders", 2)
	const drain, poll = 70 * time.Millisecond, 20 * time.Millisecond
	cfg := func(owner string) watermilladapter.SubscriberConfig {
		return watermilladapter.SubscriberConfig{Owner: owner, Ordered: true, LockTimeout: time.Hour, PollInterval: poll,
			DrainTimeout: drain, Clock: clock}
	}
	first, firstMsgs := subscribe(t, store, cfg("first"), "orders")
	held := nextMessage(t, firstMsgs, "the first relay delivered nothing")
	require.JSONEq(t, `{"step": 0}`, string(held.Payload))
	// The handler goes on with held past DrainTimeout: Close gives up on it.
	closed := make(chan error, 1)
	go func() { closed <- first.Close() }()
	relaytest.WaitForTimer(t, clock, drain)
	clock.Advance(drain)
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(relaytest.WaitLimit):
		t.Fatal("Close did not end after DrainTimeout")
	}

	claims := &claimRecorder{Driver: store.Driver()}
	_, msgs := subscribe(t, storeOn(t, claims, clock), cfg("second"), "orders")
	for i := range 5 {
		n := len(claims.recorded())
		relaytest.AdvanceUntil(t, clock, poll, fmt.Sprint("poll ", i+1, " of the second relay"), func() bool {
			return len(claims.recorded()) > n
		})
	}
	for _, c := range claims.recorded() {
		require.Empty(t, c.rows, "the second relay claimed while the first relay's handler still held step 0 under a claim of an hour")
	}
	noMessage(t, msgs, "the second relay delivered while the first relay's handler still held step 0")
	held.Ack()
}

// The next event of an ordered aggregate is claimed as soon as the DONE
// before it is recorded, even when a commit announced meanwhile (here a
// Wake, as the Publisher and a Listener send) put the claim loop into the
// cooldown's wait.
func TestOrderedAggregateIsNotHeldByTheCooldownOfAnotherCommit(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(testStart)
	sub, msgs := subscribeColdly(t, committedSteps(t, clock, "OrderCreated", 2), clock)

	first := nextMessage(t, msgs, "event 0 of the aggregate")
	require.JSONEq(t, `{"step": 0}`, string(first.Payload))
	sub.Wake("OrderCreated")                         // another aggregate's commit, announced
	relaytest.WaitForTimer(t, clock, coldlyCooldown) // the claim loop waits out the cooldown
	first.Ack()
	second := nextMessage(t, msgs, "event 1 waited for the cooldown of a wake-up that came while event 0 was in its handler")
	require.JSONEq(t, `{"step": 1}`, string(second.Payload))
	second.Ack()
}

// Ordered claims take the aggregates in turn through a backlog: the relay
// does not send them back to the first aggregate every second, as it
// sends unordered claims back to the earliest due event, which would
// serve the first aggregates again and again while the last ones wait.
// Here 1,000 aggregates of 4 events each. The next event of an aggregate
// whose event is DONE is claimed by name, taking turns with the walk that
// finds the first events of the others, so the last aggregate has its
// first event within about 2,000 of the 4,000 (1,000 if the walk had every
// claim, all but the last 3 if the first aggregates were served again and
// again): it must within 2,500.
func TestOrderedAggregatesTakeTurnsThroughABacklog(t *testing.T) {
	t.Parallel()
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{})
	require.NoError(t, err)
	const aggregates, perAggregate = 1000, 4
	var events []outbox.Envelope
	for i := range perAggregate {
		for a := range aggregates {
			e := outbox.NewJSON("OrderCreated", fmt.Appendf(nil, `{"step": %d}`, i))
			e.Topic, e.AggregateType, e.AggregateID = "orders", "Order", fmt.Sprintf("a%03d", a)
			events = append(events, e)
		}
	}
	writeCold(t, store, events...)
	_, msgs := subscribe(t, store, watermilladapter.SubscriberConfig{Ordered: true,
		WorkerCount: 1, ColdQueueCapacity: 10, BatchSize: 10, PollInterval: time.Hour}, "orders")

	last := fmt.Sprintf("a%03d", aggregates-1)
	timeout := time.After(2 * relaytest.WaitLimit)
	const within = 2500
	for delivered := range within {
		select {
		case msg := <-msgs:
			msg.Ack()
			if msg.Metadata.Get(watermilladapter.MetadataAggregateID) == last {
				t.Logf("%s had its first event as event %d", last, delivered+1)
				return
			}
		case <-timeout:
			t.Fatalf("%s had no event in time", last)
		}
	}
	t.Fatalf("%s had no event among the first %d", last, within)
}

// committedSteps commits, in one transaction on a fresh database, n events
// of the aggregate Order o-1 on topic, with the payloads {"step": 0} to
// {"step": n-1}, and returns the store, on clock (nil: the system clock).
func committedSteps(t *testing.T, clock outbox.Clock, topic string, n int) *postgres.Store {
	t.Helper()
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{Clock: clock})
	require.NoError(t, err)
	stepsOf(t, store, topic, n)
	return store
}

// coldlyCooldown is the wake cooldown of subscribeColdly's relay.
const coldlyCooldown = 2 * time.Hour

// subscribeColdly subscribes an ordered relay on clock to topic
// OrderCreated of store, whose wake-ups wait out a cooldown of two hours
// and which polls once an hour: what it claims sooner, something asked
// for at once. It is closed at the end of the test.
func subscribeColdly(t *testing.T, store *postgres.Store, clock *clocktest.Clock) (*watermilladapter.Subscriber, <-chan *message.Message) {
	t.Helper()
	return subscribe(t, store, watermilladapter.SubscriberConfig{
		Ordered: true, WakeCooldown: coldlyCooldown, PollInterval: time.Hour, Clock: clock}, "OrderCreated")
}

// walksAndNamed counts the claims that walked the topic and those that
// named aggregates, and returns the aggregates named.
func (c *claimRecorder) walksAndNamed() (walks, named int, aggregates []outboxdriver.Aggregate) {
	for _, claim := range c.recorded() {
		if len(claim.params.Aggregates) == 0 {
			walks++
			continue
		}
		named++
		aggregates = append(aggregates, claim.params.Aggregates...)
	}
	return walks, named, aggregates
}

// subscribeRecorded subscribes an ordered relay of cfg on store to topic,
// its claims recorded; the relay is closed at the end of the test.
func subscribeRecorded(t *testing.T, store *postgres.Store, cfg watermilladapter.SubscriberConfig, topic string) (*claimRecorder, *watermilladapter.Subscriber, <-chan *message.Message) {
	t.Helper()
	recorder := &claimRecorder{Driver: store.Driver()}
	cfg.Ordered = true
	sub, msgs := subscribe(t, storeOn(t, recorder, nil), cfg, topic)
	return recorder, sub, msgs
}

// requireOneWalk checks that only the first claim walked the topic and
// that at least minNamed claims named aggregates, all of them in want.
func (c *claimRecorder) requireOneWalk(t *testing.T, minNamed int, want ...outboxdriver.Aggregate) {
	t.Helper()
	walks, named, aggregates := c.walksAndNamed()
	require.Equal(t, 1, walks, "only the first claim walks the topic")
	require.GreaterOrEqual(t, named, minNamed, "claims by the aggregates' names")
	require.Subset(t, want, aggregates, "the aggregates named")
}

// Once the DONE of an ordered event is recorded, the claim of the next
// event of its aggregate names that aggregate instead of walking every
// aggregate of the topic: aggregates held back by a first event due
// tomorrow cost the one that moves nothing.
func TestOrderedDoneClaimsTheNextEventOfItsAggregateByName(t *testing.T) {
	t.Parallel()
	store := committedSteps(t, nil, "OrderCreated", 5)
	heldBack := outbox.NewJSON("OrderCreated", []byte(`{}`))
	heldBack.AggregateType, heldBack.AggregateID, heldBack.DeliverAfter = "Order", "o-2", time.Now().Add(24*time.Hour)
	writeCold(t, store, heldBack)
	// One event per claim: each DONE brings the next claim.
	recorder, _, msgs := subscribeRecorded(t, store, watermilladapter.SubscriberConfig{
		WakeCooldown: time.Hour, PollInterval: time.Hour, OrderedRunLength: 1}, "OrderCreated")
	for i := range 5 {
		msg := nextMessage(t, msgs, fmt.Sprintf("event %d of the aggregate", i))
		require.JSONEq(t, fmt.Sprintf(`{"step": %d}`, i), string(msg.Payload))
		msg.Ack()
	}
	recorder.requireOneWalk(t, 4, outboxdriver.Aggregate{Topic: "OrderCreated", Type: "Order", ID: "o-1"})
}

// Claims brought by DONEs alone do not keep the relay from walking the
// topic: an event that nothing announced (written by a process with no
// relay, not notified) is claimed by a walk at the poll interval, however
// busy one aggregate keeps the relay meanwhile.
func TestOrderedRelayStillWalksAtThePollIntervalWhileAnAggregateMoves(t *testing.T) {
	t.Parallel()
	const steps = 400
	clock := clocktest.New(testStart)
	store := committedSteps(t, clock, "OrderCreated", steps)
	_, msgs := subscribe(t, store, watermilladapter.SubscriberConfig{
		Ordered: true, WakeCooldown: time.Hour, PollInterval: 100 * time.Millisecond, Clock: clock}, "OrderCreated")
	first := nextMessage(t, msgs, "the first event of the aggregate that moves")
	writeCold(t, store, anotherAggregate())
	first.Ack()
	for step := 1; step < steps; step++ {
		msg := nextMessage(t, msgs, "the next event")
		if msg.Metadata.Get(watermilladapter.MetadataAggregateID) == "o-2" {
			msg.Ack()
			return
		}
		clock.Advance(5 * time.Millisecond) // a handler's work: DONEs keep coming for two seconds
		msg.Ack()
	}
	t.Fatalf("the event of another aggregate waited for all %d events of the one that moved", steps)
}

// anotherAggregate is an event of OrderCreated, of aggregate Order o-2.
func anotherAggregate() outbox.Envelope {
	e := outbox.NewJSON("OrderCreated", []byte(`{"other": true}`))
	e.AggregateType, e.AggregateID = "Order", "o-2"
	return e
}

// The commits of this process wake an ordered relay with their
// aggregates, which its claims name instead of walking the topic: the
// aggregates of other processes, held back or not, cost them nothing.
func TestOrderedCommitsOfThisProcessAreClaimedByName(t *testing.T) {
	t.Parallel()
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{})
	require.NoError(t, err)
	recorder, sub, msgs := subscribeRecorded(t, store, watermilladapter.SubscriberConfig{
		WakeCooldown: time.Millisecond, PollInterval: time.Hour}, "orders")
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: sub})
	require.NoError(t, err)
	relaytest.Eventually(t, "the first claim", func() bool { walks, _, _ := recorder.walksAndNamed(); return walks == 1 })

	var want []outboxdriver.Aggregate
	for i := range 3 {
		msg := newMsg(fmt.Sprint(i))
		msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
		msg.Metadata.Set(watermilladapter.MetadataAggregateID, fmt.Sprint("o-", i))
		require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			msg.SetContext(ctx)
			return pub.Publish("orders", msg)
		}))
		want = append(want, outboxdriver.Aggregate{Topic: "orders", Type: "Order", ID: fmt.Sprint("o-", i)})
		nextMessage(t, msgs, fmt.Sprint("event ", i)).Ack()
	}
	recorder.requireOneWalk(t, len(want), want...)
	_, _, named := recorder.walksAndNamed()
	require.Subset(t, named, want, "each commit's aggregate is named")
}

// An ordered event's retry is claimed when it is due by its aggregate's
// name, not by a walk: during an outage, retries coming due one after
// another each cost a look-up, whatever number of aggregates they hold
// back.
func TestOrderedRetryIsClaimedByName(t *testing.T) {
	t.Parallel()
	store := committedSteps(t, nil, "OrderCreated", 2)
	// One event per claim: a run's events released after the Nack would
	// bring a walk.
	recorder, _, msgs := subscribeRecorded(t, store, watermilladapter.SubscriberConfig{WakeCooldown: time.Millisecond,
		PollInterval: time.Hour, RetryPolicy: outbox.Backoff{Base: 50 * time.Millisecond, NoJitter: true}, OrderedRunLength: 1}, "OrderCreated")
	first := nextMessage(t, msgs, "the first event")
	first.Nack()
	again := nextMessage(t, msgs, "the first event, retried")
	require.Equal(t, first.UUID, again.UUID)
	again.Ack()
	nextMessage(t, msgs, "the second event").Ack()
	recorder.requireOneWalk(t, 2, outboxdriver.Aggregate{Topic: "OrderCreated", Type: "Order", ID: "o-1"})
}

// Named claims do not put the walk off: it comes PollInterval after the
// last walk, however recently a DONE brought a named claim. Here the
// first event's DONE, three quarters into the poll interval, brings one,
// and an event nothing announced must come with the walk due at the end
// of the interval, not a whole interval after that named claim.
func TestOrderedWalkComesAPollIntervalAfterTheLastWalk(t *testing.T) {
	t.Parallel()
	const poll = 2 * time.Second
	clock := clocktest.New(testStart)
	store := committedSteps(t, clock, "OrderCreated", 2)
	_, msgs := subscribe(t, store, watermilladapter.SubscriberConfig{
		Ordered: true, WakeCooldown: time.Hour, PollInterval: poll, Clock: clock}, "OrderCreated")
	first := nextMessage(t, msgs, "the first event, claimed by the first walk")
	writeCold(t, store, anotherAggregate())
	clock.Advance(poll * 3 / 4)
	first.Ack()
	next := nextMessage(t, msgs, "the next event of the aggregate, claimed by name")
	require.JSONEq(t, `{"step": 1}`, string(next.Payload))
	next.Ack()
	clock.Advance(poll / 4) // the walk is due
	other := nextMessage(t, msgs, "the walk waited for a poll interval after the named claim")
	require.Equal(t, "o-2", other.Metadata.Get(watermilladapter.MetadataAggregateID))
	other.Ack()
}
