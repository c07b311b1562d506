package watermilladapter

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

var planStart = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

func testPlan(ordered bool) *claimPlan {
	cfg := SubscriberConfig{Ordered: ordered, BatchSize: 50, PollInterval: 5 * time.Second,
		WakeCooldown: 5 * time.Millisecond, SkipRecent: 0}
	return newClaimPlan(&cfg, planStart)
}

// planStep is one turn of the claimer's loop, as claimLoop runs it: the
// claim times due, the room in the cold queue, the wake-ups taken, the
// aggregates named, and the result of the claim if one is made.
type planStep struct {
	at                time.Duration // since planStart
	dueNamed, dueWalk bool
	free, queued      int
	woken, named      bool
	names             bool // aggregates are waiting to be named
	n                 int  // events the claim returns
	err               error

	// What the plan must decide.
	wantRoom   bool
	wantClaim  bool
	wantNamed  bool // the claim names aggregates
	wantCursor bool // the walk starts from the cursor
	wantAgain  bool
}

// run plays steps on p and checks each decision.
func run(t *testing.T, p *claimPlan, steps []planStep) {
	t.Helper()
	for i, st := range steps {
		now := planStart.Add(st.at)
		p.begin(st.dueNamed, st.dueWalk)
		limit, room := p.limit(st.free, st.queued)
		require.Equal(t, st.wantRoom, room, "step %d: room", i)
		if !room {
			continue
		}
		p.signalled(now, st.woken, st.named)
		named := st.names && p.namesFirst()
		ok, after := p.claim(now, named)
		require.Equal(t, st.wantClaim, ok, "step %d: claim", i)
		if !ok {
			continue
		}
		require.Equal(t, st.wantNamed, named, "step %d: named", i)
		require.Equal(t, st.wantCursor, after != nil, "step %d: from the cursor", i)
		var last *outboxdriver.Position
		if st.n > 0 {
			last = &outboxdriver.Position{ID: "last", DueAt: now}
		}
		again := p.result(now, named, st.n, limit, last, st.err)
		require.Equal(t, st.wantAgain, again, "step %d: claim again at once", i)
	}
}

var errClaim = errors.New("claim failed")

func TestClaimPlanSteps(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		ordered bool
		steps   []planStep
	}{
		{
			name: "a backlog is drained claim after claim from the cursor, then once more from the start",
			steps: []planStep{
				{free: 1000, n: 50, wantRoom: true, wantClaim: true, wantAgain: true},
				{free: 950, queued: 50, n: 50, wantRoom: true, wantClaim: true, wantCursor: true, wantAgain: true},
				// Short after following the cursor: from the start, at once.
				{free: 900, queued: 100, n: 10, wantRoom: true, wantClaim: true, wantCursor: true, wantAgain: true},
				{free: 890, queued: 110, n: 0, wantRoom: true, wantClaim: true, wantAgain: false},
			},
		},
		{
			name: "no claim when the cold queue has less room than a batch and holds events",
			steps: []planStep{
				{free: 49, queued: 951, wantRoom: false},
				{free: 20, queued: 0, n: 0, wantRoom: true, wantClaim: true},
			},
		},
		{
			name: "an unordered walk starts from the start again after a second of backlog",
			steps: []planStep{
				{n: 50, free: 1000, wantRoom: true, wantClaim: true, wantAgain: true},
				{at: 500 * time.Millisecond, n: 50, free: 1000, wantRoom: true, wantClaim: true, wantCursor: true, wantAgain: true},
				{at: claimRescan, n: 50, free: 1000, wantRoom: true, wantClaim: true, wantCursor: true, wantAgain: true},
				{at: claimRescan + time.Millisecond, n: 50, free: 1000, wantRoom: true, wantClaim: true, wantCursor: false, wantAgain: true},
			},
		},
		{
			name:    "an ordered walk keeps its cursor through a long backlog",
			ordered: true,
			steps: []planStep{
				{n: 50, free: 1000, wantRoom: true, wantClaim: true, wantAgain: true},
				{at: 3 * claimRescan, n: 50, free: 1000, wantRoom: true, wantClaim: true, wantCursor: true, wantAgain: true},
				{at: 4 * claimRescan, n: 50, free: 1000, wantRoom: true, wantClaim: true, wantCursor: true, wantAgain: true},
			},
		},
		{
			name: "a failed claim neither follows the cursor nor claims again at once",
			steps: []planStep{
				{n: 50, free: 1000, wantRoom: true, wantClaim: true, wantAgain: true},
				{free: 1000, err: errClaim, wantRoom: true, wantClaim: true, wantCursor: true, wantAgain: false},
				{free: 1000, n: 0, wantRoom: true, wantClaim: true, wantCursor: false},
			},
		},
		{
			name:    "ordered claims name the aggregates they know of rather than walk",
			ordered: true,
			steps: []planStep{
				{free: 1000, wantRoom: true, wantClaim: true}, // the first claim walks
				{at: time.Second, free: 1000, names: true, n: 1, wantRoom: true, wantClaim: true, wantNamed: true},
				// Nothing named and no walk due: no claim.
				{at: 2 * time.Second, free: 1000, wantRoom: true, wantClaim: false},
				// A walk comes once the poll interval has passed since the last.
				{at: 5 * time.Second, free: 1000, names: true, n: 1, wantRoom: true, wantClaim: true, wantNamed: true, wantAgain: true},
				{at: 5 * time.Second, free: 1000, names: true, wantRoom: true, wantClaim: true, wantNamed: false},
			},
		},
		{
			name:    "names and a pending walk take turns",
			ordered: true,
			steps: []planStep{
				{free: 1000, wantRoom: true, wantClaim: true},
				// Woken: a walk is pending; the names go first.
				{at: time.Second, free: 1000, woken: true, names: true, n: 1, wantRoom: true, wantClaim: true, wantNamed: true, wantAgain: true},
				{at: time.Second, free: 1000, names: true, wantRoom: true, wantClaim: true, wantNamed: false},
				{at: time.Second, free: 1000, names: true, n: 1, wantRoom: true, wantClaim: true, wantNamed: true},
			},
		},
		{
			name:    "a failed named claim makes the next claim walk",
			ordered: true,
			steps: []planStep{
				{free: 1000, wantRoom: true, wantClaim: true},
				{at: time.Second, free: 1000, names: true, err: errClaim, wantRoom: true, wantClaim: true, wantNamed: true},
				{at: time.Second, free: 1000, wantRoom: true, wantClaim: true, wantNamed: false},
			},
		},
		{
			name:    "the poll timer makes an ordered claim walk, a claim time that names does not",
			ordered: true,
			steps: []planStep{
				{free: 1000, wantRoom: true, wantClaim: true},
				{at: time.Second, dueNamed: true, free: 1000, wantRoom: true, wantClaim: false},
				{at: time.Second, dueWalk: true, free: 1000, wantRoom: true, wantClaim: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			run(t, testPlan(tt.ordered), tt.steps)
		})
	}
}

func TestClaimPlanPollTimerWalks(t *testing.T) {
	t.Parallel()

	p := testPlan(true)
	run(t, p, []planStep{{free: 1000, wantRoom: true, wantClaim: true}})
	p.woke(wokenTimer)
	// The timer ended the wait and no claim time explains it: a poll.
	run(t, p, []planStep{{at: time.Second, free: 1000, wantRoom: true, wantClaim: true}})

	p.woke(wokenTimer)
	// A claim time that names an aggregate explains it: no walk.
	run(t, p, []planStep{{at: 2 * time.Second, dueNamed: true, free: 1000, names: true, wantRoom: true, wantClaim: true, wantNamed: true}})
}

func TestClaimPlanFailurePause(t *testing.T) {
	t.Parallel()

	p := testPlan(false)
	var pauses []time.Duration
	for range 10 {
		run(t, p, []planStep{{free: 1000, err: errClaim, wantRoom: true, wantClaim: true}})
		pauses = append(pauses, p.failWait)
	}
	require.Equal(t, []time.Duration{claimRetry, 2 * claimRetry, 4 * claimRetry, 8 * claimRetry, 16 * claimRetry,
		32 * claimRetry, 64 * claimRetry, 5 * time.Second, 5 * time.Second, 5 * time.Second}, pauses,
		"the pause doubles up to the poll interval")

	p.woke(wokenAll)
	wait, nextEnds := p.holdOff(planStart.Add(time.Second))
	require.Equal(t, 4*time.Second, wait, "a wake-up waits out the pause, counted from the claim")
	require.False(t, nextEnds, "an aggregate's next event does not end a failure pause")

	run(t, p, []planStep{{free: 1000, wantRoom: true, wantClaim: true}})
	require.Zero(t, p.failWait, "a claim that succeeds ends the pause")
}

func TestClaimPlanHoldOff(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name         string
		signal       wakeSignal
		since        time.Duration // from the last claim's start
		wantWait     time.Duration
		wantNextEnds bool
	}{
		{"a wake-up waits out the cooldown", wokenAll, time.Millisecond, 4 * time.Millisecond, true},
		{"a named wake-up too", wokenNamed, 2 * time.Millisecond, 3 * time.Millisecond, true},
		{"past the cooldown, at once", wokenAll, 10 * time.Millisecond, -5 * time.Millisecond, true},
		{"the next event of an aggregate, at once", wokenNext, time.Millisecond, -time.Millisecond, true},
		{"room, at once", wokenRoom, time.Millisecond, -time.Millisecond, true},
		{"the timer, at once", wokenTimer, time.Millisecond, -time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			p := testPlan(false)
			run(t, p, []planStep{{free: 1000, wantRoom: true, wantClaim: true}})
			p.woke(tt.signal)
			wait, nextEnds := p.holdOff(planStart.Add(tt.since))
			require.Equal(t, tt.wantWait, wait)
			require.Equal(t, tt.wantNextEnds, nextEnds)
		})
	}
}

func TestClaimPlanWait(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		ordered bool
		forRoom bool
		failed  bool
		at      time.Duration // since the last walk
		want    time.Duration
	}{
		{"unordered: the poll interval", false, false, false, 2 * time.Second, 5 * time.Second},
		{"ordered: what is left of it since the last walk", true, false, false, 2 * time.Second, 3 * time.Second},
		{"ordered, the walk overdue: at once", true, false, false, 7 * time.Second, 0},
		{"ordered, waiting for room: the poll interval", true, true, false, 2 * time.Second, 5 * time.Second},
		{"ordered, after a failure: the poll interval", true, false, true, 2 * time.Second, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			p := testPlan(tt.ordered)
			var err error
			if tt.failed {
				err = errClaim
			}
			run(t, p, []planStep{{free: 1000, err: err, wantRoom: true, wantClaim: true}})
			require.Equal(t, tt.want, p.wait(planStart.Add(tt.at), tt.forRoom))
		})
	}
}

func TestClaimPlanSkipRecentRechecks(t *testing.T) {
	t.Parallel()

	cfg := SubscriberConfig{BatchSize: 50, PollInterval: 5 * time.Second, WakeCooldown: 5 * time.Millisecond, SkipRecent: 200 * time.Millisecond}
	p := newClaimPlan(&cfg, planStart)
	p.begin(false, false)
	require.Zero(t, p.signalled(planStart, false, false), "no wake-up, no recheck")
	p.claim(planStart, false)
	p.result(planStart, false, 0, 50, nil, nil)

	now := planStart.Add(time.Second)
	p.begin(false, false)
	require.Equal(t, now.Add(200*time.Millisecond), p.signalled(now, true, false),
		"the commits a wake-up announced may be too recent for this claim: another comes when they are not")

	p.woke(wokenNamed)
	p.begin(false, false)
	require.Equal(t, now.Add(200*time.Millisecond), p.signalled(now, false, false), "a wake-up taken in the wait counts too")
}
