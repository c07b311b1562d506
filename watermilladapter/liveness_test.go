package watermilladapter_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/logtest"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// Liveness decides when a claim is abandoned: a relay whose heartbeat
// stops loses its claims within HeartbeatTimeout plus HeartbeatInterval,
// a live relay keeps them however long its handlers take. The tests run
// the relays with the default heartbeat on a clocktest.Clock, which they
// move one heartbeat at a time.

const (
	beatEvery   = watermilladapter.DefaultHeartbeatInterval
	beatTimeout = watermilladapter.DefaultHeartbeatTimeout
)

// beat moves clock to the next heartbeat of n relays that beat together,
// and waits until each has beaten (and reaped) and waits for the next.
func beat(t *testing.T, clock *clocktest.Clock, n int) time.Time {
	t.Helper()
	waitForBeats(t, clock, n)
	now := clock.Advance(beatEvery)
	waitForBeats(t, clock, n)
	return now
}

func waitForBeats(t *testing.T, clock *clocktest.Clock, n int) {
	t.Helper()
	if !clock.WaitForTimersOf(n, beatEvery, relaytest.WaitLimit) {
		t.Fatalf("fewer than %d relays wait for their heartbeat; the clock's timers: %v", n, clock.Armed())
	}
}

// heartbeatOf returns the until of owner's heartbeat, and false when it
// has none.
func heartbeatOf(t *testing.T, pool *pgxpool.Pool, owner string) (time.Time, bool) {
	t.Helper()
	var until time.Time
	err := pool.QueryRow(t.Context(), `SELECT until FROM outbox_event_lease WHERE name = $1`,
		outboxdriver.HeartbeatName(owner)).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false
	}
	require.NoError(t, err)
	return until, true
}

// A relay killed while holding claims: another relay releases them one
// heartbeat after the dead relay's heartbeat expired, and delivers them at
// once, long before their leases end.
func TestDeadRelaysClaimsAreReleasedWithinTheHeartbeatTimeout(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	store := storeWithBacklog(t, pool, clock, 20)
	died := clock.Now()
	_, err := store.Driver().Heartbeat(t.Context(), outboxdriver.HeartbeatParams{Owner: "killed", Until: died.Add(beatTimeout)})
	require.NoError(t, err)
	claimed, err := store.Driver().Claim(t.Context(), &outboxdriver.ClaimParams{Owner: "killed", Topic: "orders",
		Now: died, CreatedBefore: died, LockedUntil: died.Add(watermilladapter.DefaultLockTimeout), Limit: 50})
	require.NoError(t, err)
	require.Len(t, claimed, 20)

	logger, logs := logtest.New()
	_, msgs := subscribe(t, store, watermilladapter.SubscriberConfig{Clock: clock, Logger: logger}, "orders")
	for clock.Now().Before(died.Add(beatTimeout)) {
		beat(t, clock, 1)
		noMessage(t, msgs, "released while the dead relay's heartbeat ran")
	}
	released := beat(t, clock, 1)
	require.Equal(t, died.Add(beatTimeout+beatEvery), released, "released within HeartbeatTimeout+HeartbeatInterval")
	// A poll claim that runs late under load, at the release's time, makes
	// the release's wake-up wait out WakeCooldown: the clock moves a
	// millisecond at a time until the first event comes.
	msg := nextMessageOnClock(t, clock, time.Millisecond, msgs, "the dead relay's events, at once")
	seen := map[string]bool{}
	for i := range 20 {
		if i > 0 {
			msg = nextMessage(t, msgs, "the dead relay's events, at once")
		}
		seen[msg.Metadata.Get(watermilladapter.MetadataEventID)] = true
		msg.Ack()
	}
	require.Len(t, seen, 20)
	require.Less(t, clock.Now().Sub(released), time.Second, "delivered without waiting for a poll")
	lines := logs.Find(slog.LevelInfo, "outbox: released the claims of relay killed presumed dead")
	require.Len(t, lines, 1)
	require.EqualValues(t, 20, lines[0].Attrs["events"])
	_, alive := heartbeatOf(t, pool, "killed")
	require.False(t, alive, "the dead relay's heartbeat is gone")
	advanceUntilDone(t, clock, pool, 20)
}

// Two live relays, one of them with a handler that takes three heartbeat
// timeouts: it keeps its claim, and the event is delivered once.
func TestLiveRelayKeepsItsClaimWhileItsHandlerRuns(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	store := storeWithBacklog(t, pool, clock, 1)
	slow, slowMsgs := subscribe(t, store, watermilladapter.SubscriberConfig{Clock: clock}, "orders")
	msg := nextMessage(t, slowMsgs, "the first relay delivered nothing")
	_, otherMsgs := subscribe(t, store, watermilladapter.SubscriberConfig{Clock: clock}, "orders")

	for clock.Now().Before(testStart.Add(3 * beatTimeout)) {
		beat(t, clock, 2)
		noMessage(t, otherMsgs, "the live relay's event went to the other relay")
		noMessage(t, slowMsgs, "the live relay's event was delivered again")
	}
	require.Equal(t, slow.Owner(), eventStatus(t, store, msg).LockedBy, "the live relay holds its claim")
	msg.Ack()
	advanceUntilDone(t, clock, pool, 1)
}

// After a database outage longer than the heartbeat timeout every
// heartbeat has expired; each relay waits for a heartbeat timeout of its
// own heartbeats before it takes another for dead, so that live relays
// renew first and keep their claims.
func TestRelaysDoNotReapEachOtherAfterAnOutage(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	store := storeWithBacklog(t, pool, clock, 1)
	logger, logs := logtest.New()
	first, firstMsgs := subscribe(t, store, watermilladapter.SubscriberConfig{Clock: clock, Logger: logger}, "orders")
	msg := nextMessage(t, firstMsgs, "the first relay delivered nothing")
	_, otherMsgs := subscribe(t, store, watermilladapter.SubscriberConfig{Clock: clock, Logger: logger}, "orders")
	for clock.Now().Before(testStart.Add(2 * beatTimeout)) {
		beat(t, clock, 2)
	}

	// No statement ran for a minute: both heartbeats expired.
	waitForBeats(t, clock, 2)
	outageEnd := clock.Advance(time.Minute - beatEvery)
	for clock.Now().Before(outageEnd.Add(2 * beatTimeout)) {
		beat(t, clock, 2)
		noMessage(t, otherMsgs, "a live relay's claim went to the other relay")
	}
	require.Equal(t, first.Owner(), eventStatus(t, store, msg).LockedBy)
	require.Empty(t, logs.Find(slog.LevelWarn, "outbox: this relay was presumed dead and its claims released; events in flight may be delivered twice"))
	msg.Ack()
	advanceUntilDone(t, clock, pool, 1)
}

// stoppableHeartbeat is a driver whose heartbeats fail while stopped is
// set: a relay that looks dead to the others while its handlers run.
type stoppableHeartbeat struct {
	outboxdriver.Driver[pgx.Tx]
	stopped  atomic.Bool
	outcomes atomic.Int64 // RecordOutcomes statements
}

func (d *stoppableHeartbeat) RecordOutcomes(ctx context.Context, p outboxdriver.RecordOutcomesParams) (int64, error) {
	defer d.outcomes.Add(1)
	return d.Driver.RecordOutcomes(ctx, p)
}

func (d *stoppableHeartbeat) Heartbeat(ctx context.Context, p outboxdriver.HeartbeatParams) (bool, error) {
	if d.stopped.Load() {
		return false, errors.New("heartbeat stopped by the test")
	}
	return d.Driver.Heartbeat(ctx, p)
}

// A relay presumed dead while alive: its claim goes to another relay, and
// its late Nack changes nothing. It learns that it was presumed dead when
// its heartbeat comes back.
func TestOutcomeOfAPresumedDeadRelayChangesNothing(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	store := storeWithBacklog(t, pool, clock, 1)
	stoppable := &stoppableHeartbeat{Driver: store.Driver()}
	logger, logs := logtest.New()
	_, staleMsgs := subscribe(t, storeOn(t, stoppable, clock), watermilladapter.SubscriberConfig{Clock: clock, Logger: logger}, "orders")
	stale := nextMessage(t, staleMsgs, "the first relay delivered nothing")
	live, liveMsgs := subscribe(t, store, watermilladapter.SubscriberConfig{Clock: clock}, "orders")
	for clock.Now().Before(testStart.Add(beatTimeout)) {
		beat(t, clock, 2)
	}

	stoppable.stopped.Store(true)
	var again *message.Message
	for again == nil {
		beat(t, clock, 2)
		select {
		case again = <-liveMsgs:
		default:
		}
	}
	require.Equal(t, stale.Metadata.Get(watermilladapter.MetadataEventID), again.Metadata.Get(watermilladapter.MetadataEventID))

	stale.Nack()
	relaytest.AdvanceUntil(t, clock, watermilladapter.SettleLinger, "the stale Nack recorded", func() bool {
		return stoppable.outcomes.Load() > 0
	})
	e := eventStatus(t, store, again)
	require.Equal(t, outbox.StatusNew, e.Status, "the stale Nack changed nothing")
	require.Zero(t, e.Attempts)
	require.Equal(t, live.Owner(), e.LockedBy, "the live relay's claim holds")

	// One heartbeat of both relays, waited for: the clock must not run
	// past the renewed heartbeat's timeout before the live relay sees it,
	// or the stale relay is presumed dead again.
	stoppable.stopped.Store(false)
	beat(t, clock, 2)
	require.Len(t, logs.Find(slog.LevelWarn, "outbox: this relay was presumed dead and its claims released; events in flight may be delivered twice"), 1,
		"the relay told that it was presumed dead")
	again.Ack()
	advanceUntilDone(t, clock, pool, 1)
}

// A Close that recorded everything ends the relay's heartbeat.
func TestCloseEndsTheHeartbeat(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	store := storeWithBacklog(t, pool, clock, 0)
	sub, _ := subscribe(t, store, watermilladapter.SubscriberConfig{Clock: clock}, "orders")
	until, alive := heartbeatOf(t, pool, sub.Owner())
	require.True(t, alive, "the heartbeat is written at Subscribe")
	require.True(t, testStart.Add(beatTimeout).Equal(until), "until %s", until)
	beat(t, clock, 1)
	until, _ = heartbeatOf(t, pool, sub.Owner())
	require.True(t, testStart.Add(beatEvery+beatTimeout).Equal(until), "renewed every HeartbeatInterval, until %s", until)

	require.NoError(t, relaytest.Close(t, sub, clock))
	_, alive = heartbeatOf(t, pool, sub.Owner())
	require.False(t, alive)
}
