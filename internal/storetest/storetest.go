// Package storetest is the conformance suite of the store dialects: every
// behaviour of an [outboxdriver.Driver] that does not depend on the
// dialect, run against a real database. Events are written and read as
// users do, through an [outbox.Store] and an [outbox.Writer]; the relay's
// statements (claims, releases, outcomes, purge batches) run on the
// store's driver with the parameters the relay would prepare. Each
// dialect's tests call [Run] with a [Harness] on a fresh database per
// test. Tests only.
//
// What the engine does before a driver sees a request (validation,
// defaults, splitting a batch of outcomes, sorting claims) is tested with
// the engine, not here.
package storetest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// Start is the time the harness clock must start at.
var Start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Harness is one store on an empty, migrated database with the default
// table, and what the suite needs to look behind it.
type Harness[Tx any] struct {
	// Store is the store under test; its clock is Clock.
	Store *outbox.Store[Tx]
	// DeleteDone is a store of the same dialect on the same table and
	// clock, configured to delete delivered events.
	DeleteDone *outbox.Store[Tx]
	// Clock is the store's clock, set to [Start].
	Clock *clocktest.Clock
	// Tx begins, commits and rolls back a transaction the test owns, on
	// the store's database.
	Tx TxFuncs[Tx]
	// Exec runs a statement without arguments in tx.
	Exec func(ctx context.Context, tx Tx, sql string) error
	// Count returns the number of rows in the outbox table.
	Count func(t *testing.T) int
	// CorruptHeaders stores headers that are valid JSON but not an object
	// of strings, {"a": 1}, in the row of event id.
	CorruptHeaders func(t *testing.T, id string)
	// Blocked reports whether a statement on the store's database waits
	// for a lock now; nil for a database of one writer at a time, where a
	// second transaction that writes waits to begin instead.
	Blocked func(t *testing.T) bool
}

// TxFuncs begin, commit and roll back a transaction of type Tx.
type TxFuncs[Tx any] struct {
	Begin    func(ctx context.Context) (Tx, error)
	Commit   func(ctx context.Context, tx Tx) error
	Rollback func(ctx context.Context, tx Tx) error
}

// Run runs the suite, each test in parallel on the harness newHarness
// returns for it.
func Run[Tx any](t *testing.T, newHarness func(t *testing.T) Harness[Tx]) {
	tests := []struct {
		name string
		fn   func(t *testing.T, f *fixture[Tx])
	}{
		{"RollbackLeavesNoRowCommitLeavesOne", testRollbackLeavesNoRowCommitLeavesOne[Tx]},
		{"WriteInCallerOwnedTransaction", testWriteInCallerOwnedTransaction[Tx]},
		{"AfterCommitHooksRunOnlyOnCommitInOrder", testAfterCommitHooksRunOnlyOnCommitInOrder[Tx]},
		{"AfterRollbackHooksRunOnlyOnRollback", testAfterRollbackHooksRunOnlyOnRollback[Tx]},
		{"HotPathReceivesCommittedEventsWrittenClaimed", testHotPathReceivesCommittedEventsWrittenClaimed[Tx]},
		{"HotPathTakesOnlyWhatSavepointsKept", testHotPathTakesOnlyWhatSavepointsKept[Tx]},
		{"InsertRoundTripsEveryField", testInsertRoundTripsEveryField[Tx]},
		{"InsertBatches", testInsertBatches[Tx]},
		{"PayloadOfTheLargestSize", testPayloadOfTheLargestSize[Tx]},
		{"DuplicateEventID", testDuplicateEventID[Tx]},
		{"IdempotencyKeyWrittenTwiceInOneTransaction", testIdempotencyKeyWrittenTwiceInOneTransaction[Tx]},
		{"IdempotencyKeyInSequentialTransactions", testIdempotencyKeyInSequentialTransactions[Tx]},
		{"IdempotencyKeyIsPerTopic", testIdempotencyKeyIsPerTopic[Tx]},
		{"IdempotencyKeyInConcurrentTransactions", testIdempotencyKeyInConcurrentTransactions[Tx]},
		{"IdempotencyKeyRejected", testIdempotencyKeyRejected[Tx]},
		{"IdempotencyKeyLimits", testIdempotencyKeyLimits[Tx]},
		{"IdempotencyKeyAndDuplicateEventID", testIdempotencyKeyAndDuplicateEventID[Tx]},
		{"IdempotencyKeyFreedWithItsRow", testIdempotencyKeyFreedWithItsRow[Tx]},
		{"StatusTransitions", testStatusTransitions[Tx]},
		{"StaleOutcomesChangeNothing", testStaleOutcomesChangeNothing[Tx]},
		{"OutcomeWrittenTwiceCountsOnce", testOutcomeWrittenTwiceCountsOnce[Tx]},
		{"DeleteDoneDeletesOnlyDeliveredEvents", testDeleteDoneDeletesOnlyDeliveredEvents[Tx]},
		{"DelayedEventsInvisibleUntilDue", testDelayedEventsInvisibleUntilDue[Tx]},
		{"RetryAndDeferredDueAgainAtNextTime", testRetryAndDeferredDueAgainAtNextTime[Tx]},
		{"ClaimLocksAndExpires", testClaimLocksAndExpires[Tx]},
		{"ReleaseLetsOthersClaimAtOnce", testReleaseLetsOthersClaimAtOnce[Tx]},
		{"ReleaseOwnedHandsBackAnEarlierRunsClaims", testReleaseOwnedHandsBackAnEarlierRunsClaims[Tx]},
		{"ClaimEndKeepsDueOrder", testClaimEndKeepsDueOrder[Tx]},
		{"ClaimSkipsRecentEvents", testClaimSkipsRecentEvents[Tx]},
		{"ClaimTakesRecentRetries", testClaimTakesRecentRetries[Tx]},
		{"ClaimByTopic", testClaimByTopic[Tx]},
		{"ClaimTakesTheEarliestDueFirst", testClaimTakesTheEarliestDueFirst[Tx]},
		{"ClaimCursorCoversTheBacklogOnce", testClaimCursorCoversTheBacklogOnce[Tx]},
		{"OrderedClaimTakesOneEventPerAggregateInWriteOrder", testOrderedClaimTakesOneEventPerAggregateInWriteOrder[Tx]},
		{"OrderedClaimKeepsTopicsApart", testOrderedClaimKeepsTopicsApart[Tx]},
		{"OrderedClaimOfNamedAggregates", testOrderedClaimOfNamedAggregates[Tx]},
		{"OrderedClaimTakesRuns", testOrderedClaimTakesRuns[Tx]},
		{"OrderedRunStopsBeforeWhatIsNotDue", testOrderedRunStopsBeforeWhatIsNotDue[Tx]},
		{"OrderedRunsOfNamedAggregates", testOrderedRunsOfNamedAggregates[Tx]},
		{"DeadEventsQueryCountReplay", testDeadEventsQueryCountReplay[Tx]},
		{"EmptyIDListMatchesNoDeadEvent", testEmptyIDListMatchesNoDeadEvent[Tx]},
		{"ReplayEveryDeadEvent", testReplayEveryDeadEvent[Tx]},
		{"PurgeDeletesOnlyOldTerminalRows", testPurgeDeletesOnlyOldTerminalRows[Tx]},
		{"DeadFilterFields", testDeadFilterFields[Tx]},
		{"DeadActionsNeedAFilter", testDeadActionsNeedAFilter[Tx]},
		{"PurgeDeadBatch", testPurgeDeadBatch[Tx]},
		{"Stats", testStats[Tx]},
		{"DeadGroups", testDeadGroups[Tx]},
		{"QueryPending", testQueryPending[Tx]},
		{"QueryEvents", testQueryEvents[Tx]},
		{"AggregateEvents", testAggregateEvents[Tx]},
		{"AcquireLease", testAcquireLease[Tx]},
		{"Retain", testRetain[Tx]},
		{"HeartbeatRenews", testHeartbeatRenews[Tx]},
		{"StatsRelays", testStatsRelays[Tx]},
		{"ReleaseDeadRelays", testReleaseDeadRelays[Tx]},
		{"ReleaseDeadRelaysOnce", testReleaseDeadRelaysOnce[Tx]},
		{"MalformedHeadersDoNotBreakTheBatch", testMalformedHeadersDoNotBreakTheBatch[Tx]},
		{"BatchReadsEqualSingleReads", testBatchReadsEqualSingleReads[Tx]},
		{"GetUnknownEvent", testGetUnknownEvent[Tx]},
		{"Backlog", testBacklog[Tx]},
		{"InboxRecordsOncePerConsumer", testInboxRecordsOncePerConsumer[Tx]},
		{"InboxWaitsForAnOpenTransaction", testInboxWaitsForAnOpenTransaction[Tx]},
		{"InboxTakesNamesAtTheLimits", testInboxTakesNamesAtTheLimits[Tx]},
		{"InboxPurge", testInboxPurge[Tx]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, newFixture(t, newHarness))
		})
	}
}

type fixture[Tx any] struct {
	Harness[Tx]
	driver outboxdriver.Driver[Tx]
	writer *outbox.Writer[Tx]
}

func newFixture[Tx any](t *testing.T, newHarness func(t *testing.T) Harness[Tx]) *fixture[Tx] {
	t.Helper()
	h := newHarness(t)
	require.Equal(t, Start, h.Clock.Now(), "the harness clock starts at storetest.Start")
	writer, err := outbox.NewWriter(h.Store, outbox.WriterConfig{})
	require.NoError(t, err)
	return &fixture[Tx]{Harness: h, driver: h.Store.Driver(), writer: writer}
}

// write commits events in one transaction and returns their ids.
func (f *fixture[Tx]) write(t *testing.T, events ...outbox.Envelope) []string {
	t.Helper()
	return f.writeWith(t, f.writer, events...)
}

func (f *fixture[Tx]) writeWith(t *testing.T, w *outbox.Writer[Tx], events ...outbox.Envelope) []string {
	t.Helper()
	var ids []string
	err := f.Store.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
		var err error
		ids, err = w.Write(ctx, tx, events...)
		return err
	})
	require.NoError(t, err)
	return ids
}

func (f *fixture[Tx]) get(t *testing.T, id string) outbox.Event {
	t.Helper()
	e, err := f.Store.Get(t.Context(), id)
	require.NoError(t, err)
	return e
}

// getRow returns the driver's row of id.
func (f *fixture[Tx]) getRow(t *testing.T, id string) outboxdriver.Row {
	t.Helper()
	r, found, err := f.driver.Get(t.Context(), id)
	require.NoError(t, err)
	require.True(t, found, id)
	return r
}

// request is a claim as a relay makes it; the fixture turns it into the
// driver's parameters at the clock's time.
type request struct {
	Owner string
	// Topic defaults to JSONEvent's, OrderCreated.
	Topic string
	// Limit defaults to 100.
	Limit int
	// Lease defaults to DefaultLease.
	Lease      time.Duration
	SkipRecent time.Duration
	Ordered    bool
	Aggregates []outboxdriver.Aggregate
	// RunLength and RunRows ask for runs (see outboxdriver.ClaimParams).
	RunLength, RunRows int
	// Cursor, when set, makes each claim start after the previous one, as
	// the relay's claims of a backlog do.
	Cursor *cursor
}

// cursor is where the previous claim of a run ended; the zero value
// starts from the earliest due row.
type cursor struct{ at *outboxdriver.Position }

func (c *cursor) reset() { c.at = nil }

func (f *fixture[Tx]) params(req request) *outboxdriver.ClaimParams {
	now := f.Clock.Now()
	p := ClaimParams(req.Owner, req.Topic, req.Limit, now)
	if p.Topic == "" {
		p.Topic = string(JSONEvent(0).Type)
	}
	if p.Limit == 0 {
		p.Limit = 100
	}
	if req.Lease != 0 {
		p.LockedUntil = now.Add(req.Lease)
	}
	p.CreatedBefore = now.Add(-req.SkipRecent)
	p.Ordered, p.Aggregates = req.Ordered, req.Aggregates
	p.RunLength, p.RunRows = req.RunLength, max(req.RunRows, p.Limit)
	if req.Cursor != nil {
		p.After = req.Cursor.at
	}
	return p
}

// claimRows runs req and returns the rows in due order, moving its cursor
// past them.
func (f *fixture[Tx]) claimRows(t *testing.T, req request) []outboxdriver.Row {
	t.Helper()
	rows := Claim(t, f.driver, f.params(req))
	if at := SortClaimed(rows, req.Ordered); at != nil && req.Cursor != nil {
		req.Cursor.at = at
	}
	return rows
}

// claim runs req and returns the ids claimed, in due order.
func (f *fixture[Tx]) claim(t *testing.T, req request) []string {
	t.Helper()
	return IDs(f.claimRows(t, req))
}

// markDone records ids delivered, at the clock's time.
func (f *fixture[Tx]) markDone(t *testing.T, ids ...string) int64 {
	t.Helper()
	return f.markDoneBy(t, f.driver, ids...)
}

func (f *fixture[Tx]) markDoneBy(t *testing.T, d outboxdriver.Executor, ids ...string) int64 {
	t.Helper()
	n, err := d.MarkDone(t.Context(), outboxdriver.MarkDoneParams{Now: f.Clock.Now(), IDs: ids})
	require.NoError(t, err)
	return n
}

// record records outcomes reported by owner, at the clock's time.
func (f *fixture[Tx]) record(t *testing.T, owner string, outcomes ...outboxdriver.Outcome) int64 {
	t.Helper()
	return f.recordBy(t, f.driver, owner, outcomes...)
}

func (f *fixture[Tx]) recordBy(t *testing.T, d outboxdriver.Executor, owner string, outcomes ...outboxdriver.Outcome) int64 {
	t.Helper()
	n, err := d.RecordOutcomes(t.Context(), outboxdriver.RecordOutcomesParams{Now: f.Clock.Now(), Owner: owner, Outcomes: outcomes})
	require.NoError(t, err)
	return n
}

// release ends owner's leases on ids.
func (f *fixture[Tx]) release(t *testing.T, owner string, ids ...string) int64 {
	t.Helper()
	n, err := f.driver.Release(t.Context(), outboxdriver.ReleaseParams{Owner: owner, IDs: ids})
	require.NoError(t, err)
	return n
}

// retry is a failed delivery of id that makes it RETRY, due at next.
func retry(id string, next time.Time, err string) outboxdriver.Outcome {
	return outboxdriver.Outcome{ID: id, Status: int16(outbox.StatusRetry), AttemptSpent: true, NextAt: next, Error: err}
}

// dead is a failed delivery of id that makes it DEAD.
func dead(id, err string) outboxdriver.Outcome {
	return outboxdriver.Outcome{ID: id, Status: int16(outbox.StatusDead), AttemptSpent: true, Error: err}
}

// deferral makes id due again at next, keeping its status and attempts.
func deferral(id string, next time.Time, err string) outboxdriver.Outcome {
	return outboxdriver.Outcome{ID: id, NextAt: next, Error: err}
}

// checked is o applying only while its row has before failed attempts.
func checked(o outboxdriver.Outcome, before int) outboxdriver.Outcome {
	o.AttemptsChecked, o.AttemptsBefore = true, before
	return o
}

// JSONEvent is an OrderCreated event whose JSON payload has spacing a JSON
// normaliser would change.
func JSONEvent(i int) outbox.Envelope {
	return outbox.NewJSON("OrderCreated", fmt.Appendf(nil, `{"order": %d,  "note": "spaces  kept"}`, i))
}

// JSONEvents is JSONEvent 0 to n-1 on topic; an empty topic leaves the
// default, the event type.
func JSONEvents(n int, topic string) []outbox.Envelope {
	events := make([]outbox.Envelope, n)
	for i := range events {
		events[i] = JSONEvent(i)
		events[i].Topic = topic
	}
	return events
}

// HotPath is a relay's hot path that takes every event, under Owner's
// lease of Lease (none: the writer's default), and records what it is
// handed. Without an Owner, a writer hands it nothing.
type HotPath struct {
	Owner string
	Lease time.Duration
	mu    sync.Mutex
	got   []outbox.Envelope
}

var _ outbox.HotPath = (*HotPath)(nil)

// HotLease implements [outbox.HotPath].
func (h *HotPath) HotLease() (string, time.Duration) { return h.Owner, h.Lease }

// TakesHot implements [outbox.HotPath]: every topic.
func (h *HotPath) TakesHot(string) bool { return true }

// Committed implements [outbox.HotPath]; it records nothing.
func (h *HotPath) Committed([]outbox.Envelope) {}

// DeliverHot implements [outbox.HotPath].
func (h *HotPath) DeliverHot(_ context.Context, events []outbox.Envelope, _ time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, events...)
}

// Delivered returns the events handed over so far, in order.
func (h *HotPath) Delivered() []outbox.Envelope {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

// hotWriter returns a writer whose hot path, owned by owner, takes every
// event.
func (f *fixture[Tx]) hotWriter(t *testing.T, owner string, lease time.Duration) (*outbox.Writer[Tx], *HotPath) {
	t.Helper()
	hot := &HotPath{Owner: owner, Lease: lease}
	w, err := outbox.NewWriter(f.Store, outbox.WriterConfig{HotPath: hot})
	require.NoError(t, err)
	return w, hot
}

func testRollbackLeavesNoRowCommitLeavesOne[Tx any](t *testing.T, f *fixture[Tx]) {
	boom := errors.New("business rule failed")
	err := f.Store.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
		_, err := f.writer.Write(ctx, tx, JSONEvent(1))
		require.NoError(t, err)
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Zero(t, f.Count(t))

	f.write(t, JSONEvent(2))
	require.Equal(t, 1, f.Count(t))
}

func testWriteInCallerOwnedTransaction[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	tx, err := f.Tx.Begin(ctx)
	require.NoError(t, err)
	ids, err := f.writer.Write(ctx, tx, JSONEvent(1))
	require.NoError(t, err)
	require.Zero(t, f.Count(t), "invisible before commit")
	require.NoError(t, f.Tx.Commit(ctx, tx))
	require.Equal(t, outbox.StatusNew, f.get(t, ids[0]).Status)

	tx, err = f.Tx.Begin(ctx)
	require.NoError(t, err)
	_, err = f.writer.Write(ctx, tx, JSONEvent(2))
	require.NoError(t, err)
	require.NoError(t, f.Tx.Rollback(ctx, tx))
	require.Equal(t, 1, f.Count(t))
}

// hookLog is the names of the hooks that ran, in order.
type hookLog struct {
	mu    sync.Mutex
	names []string
}

// hook returns a hook that adds name to the log.
func (l *hookLog) hook(name string) func(context.Context) error {
	return func(context.Context) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.names = append(l.names, name)
		return nil
	}
}

// take returns the names logged, and empties the log.
func (l *hookLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := l.names
	l.names = nil
	return names
}

func testAfterCommitHooksRunOnlyOnCommitInOrder[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	var got hookLog
	record := got.hook
	err := f.Store.InTx(ctx, func(ctx context.Context, tx Tx) error {
		require.NoError(t, outbox.AfterCommit(ctx, record("first")))
		require.NoError(t, outbox.AfterCommit(ctx, func(context.Context) error { panic("hook panics") }))
		require.NoError(t, outbox.AfterCommit(ctx, func(context.Context) error { return errors.New("hook fails") }))
		require.NoError(t, outbox.AfterCommit(ctx, record("second")))
		_, err := f.writer.Write(ctx, tx, JSONEvent(1))
		return err
	})
	require.NoError(t, err, "failing hooks never fail the commit")
	require.Equal(t, []string{"first", "second"}, got.take())
	require.Equal(t, 1, f.Count(t))

	err = f.Store.InTx(ctx, func(ctx context.Context, tx Tx) error {
		require.NoError(t, outbox.AfterCommit(ctx, record("rolled back")))
		return errors.New("rollback")
	})
	require.Error(t, err)
	require.Empty(t, got.take())
}

// After-rollback hooks run once the transaction has rolled back, in
// order, whether its function failed or its commit did (a duplicate event
// id, which PostgreSQL's InTx may report only at the commit), and never
// after a commit.
func testAfterRollbackHooksRunOnlyOnRollback[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	var got hookLog
	record := got.hook
	inTx := func(events []outbox.Envelope, fnErr error) error {
		return f.Store.InTx(ctx, func(ctx context.Context, tx Tx) error {
			require.NoError(t, outbox.AfterCommit(ctx, record("after commit")))
			require.NoError(t, outbox.AfterRollback(ctx, record("first")))
			require.NoError(t, outbox.AfterRollback(ctx, func(context.Context) error { panic("hook panics") }))
			require.NoError(t, outbox.AfterRollback(ctx, record("second")))
			if _, err := f.writer.Write(ctx, tx, events...); err != nil {
				return err
			}
			return fnErr
		})
	}
	event := JSONEvent(1)
	event.ID = outbox.NewID()

	require.Error(t, inTx([]outbox.Envelope{event}, errors.New("rollback")))
	require.Equal(t, []string{"first", "second"}, got.take())
	require.Zero(t, f.Count(t))

	require.NoError(t, inTx([]outbox.Envelope{event}, nil))
	require.Equal(t, []string{"after commit"}, got.take())
	require.Equal(t, 1, f.Count(t))

	require.ErrorIs(t, inTx([]outbox.Envelope{event}, nil), outbox.ErrDuplicateEvent)
	require.Equal(t, []string{"first", "second"}, got.take())
	require.Equal(t, 1, f.Count(t))
}

// The rows a hot path takes are written leased to it, due at once; a
// delayed event is written as any other. Another relay leaves the leased
// row alone until its lease ends.
func testHotPathReceivesCommittedEventsWrittenClaimed[Tx any](t *testing.T, f *fixture[Tx]) {
	writer, hot := f.hotWriter(t, "relay-a", time.Minute)
	delayed := JSONEvent(2)
	delayed.DeliverAfter = Start.Add(time.Hour)
	written := f.writeWith(t, writer, JSONEvent(1), delayed)
	got := hot.Delivered()
	require.Len(t, got, 1)
	require.Equal(t, written[0], got[0].ID)

	hotRow, cold := f.get(t, written[0]), f.get(t, written[1])
	require.Equal(t, "relay-a", hotRow.LockedBy, "hot-path rows are written claimed by the writing relay")
	require.Equal(t, Start, hotRow.LockedAt.UTC())
	require.Equal(t, Start.Add(time.Minute), hotRow.LockedUntil.UTC(), "due again for others when the lease ends")
	require.Equal(t, Start, hotRow.AvailableAt.UTC(), "due now, under the writer's lease")
	require.Equal(t, outbox.StatusNew, hotRow.Status)
	require.Zero(t, hotRow.Attempts)
	require.Empty(t, cold.LockedBy, "delayed rows are never pre-claimed")
	require.True(t, cold.LockedAt.IsZero())
	require.True(t, cold.LockedUntil.IsZero())
	require.Equal(t, delayed.DeliverAfter, cold.AvailableAt.UTC())

	req := request{Owner: "relay-b", Lease: time.Minute}
	require.Empty(t, f.claim(t, req), "another relay leaves the hot row alone while the claim is fresh")
	f.Clock.Advance(time.Minute)
	require.Equal(t, written[:1], f.claim(t, req), "the claim of a relay that died expires")
}

// namedRow is an event's row as the engine prepares it, with payload as
// its bytes.
func namedRow(payload string) outboxdriver.InsertRow {
	return outboxdriver.InsertRow{ID: outbox.NewID(), Type: "Named", Topic: "Named", AggregateType: string(outbox.GlobalAggregate),
		Payload: []byte(payload), OccurredAt: Start, AvailableAt: Start}
}

// Rows written while a savepoint is open are the savepoint's, whatever
// transaction they were written through: the driver marks such writes,
// and tells which it kept, so that the hot path receives them only if the
// savepoint, and any it was in, was released.
func testHotPathTakesOnlyWhatSavepointsKept[Tx any](t *testing.T, f *fixture[Tx]) {
	writer, hot := f.hotWriter(t, "relay-a", time.Minute)
	exec := func(ctx context.Context, tx Tx, sqls ...string) {
		for _, sql := range sqls {
			require.NoError(t, f.Exec(ctx, tx, sql))
		}
	}
	write := func(ctx context.Context, tx Tx, names ...string) {
		events := make([]outbox.Envelope, len(names))
		for i, name := range names {
			events[i] = outbox.NewBytes("Named", []byte(name))
		}
		_, err := writer.Write(ctx, tx, events...)
		require.NoError(t, err)
	}
	var (
		mark, coldMark, topMark uint64
		keptOpen, keptGone      []string
	)
	require.NoError(t, f.Store.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
		exec(ctx, tx, "SAVEPOINT a")
		write(ctx, tx, "rolled back")
		row := namedRow("inserted in a savepoint")
		res, err := f.driver.Insert(ctx, tx, &outboxdriver.InsertParams{Rows: []outboxdriver.InsertRow{row}, Now: Start, Mark: true})
		require.NoError(t, err)
		mark = res.Savepoint
		keptOpen, err = f.driver.Kept(ctx, tx, mark, []string{row.ID})
		require.NoError(t, err)
		exec(ctx, tx, "ROLLBACK TO SAVEPOINT a")
		keptGone, err = f.driver.Kept(ctx, tx, mark, []string{row.ID})
		require.NoError(t, err)
		exec(ctx, tx, "RELEASE SAVEPOINT a")

		write(ctx, tx, "top level")
		exec(ctx, tx, "SAVEPOINT b")
		write(ctx, tx, "released one", "released two")
		exec(ctx, tx, "RELEASE SAVEPOINT b")
		exec(ctx, tx, "SAVEPOINT c", "SAVEPOINT d")
		write(ctx, tx, "released into a savepoint rolled back")
		exec(ctx, tx, "RELEASE SAVEPOINT d", "ROLLBACK TO SAVEPOINT c", "RELEASE SAVEPOINT c")
		res, err = f.driver.Insert(ctx, tx, &outboxdriver.InsertParams{Rows: []outboxdriver.InsertRow{namedRow("cold")}, Now: Start})
		require.NoError(t, err)
		coldMark = res.Savepoint
		top := namedRow("top level, asked for its mark")
		res, err = f.driver.Insert(ctx, tx, &outboxdriver.InsertParams{Rows: []outboxdriver.InsertRow{top}, Now: Start, Mark: true})
		require.NoError(t, err)
		topMark = res.Savepoint
		if topMark != 0 {
			// The driver cannot tell: it must find the row kept.
			kept, err := f.driver.Kept(ctx, tx, topMark, []string{top.ID})
			require.NoError(t, err)
			require.Equal(t, []string{top.ID}, kept, "a row of the top-level transaction is kept")
		}
		return nil
	}))
	require.NotZero(t, mark, "a write in a savepoint is marked")
	require.Len(t, keptOpen, 1, "kept while its savepoint is open")
	require.Empty(t, keptGone, "not kept once its savepoint rolled back")
	require.Zero(t, coldMark, "a write that asks for no mark gets none")
	var got []string
	for _, e := range hot.Delivered() {
		got = append(got, string(e.Payload()))
	}
	require.Equal(t, []string{"top level", "released one", "released two"}, got)
	require.Equal(t, 5, f.Count(t))
}

func testInsertRoundTripsEveryField[Tx any](t *testing.T, f *fixture[Tx]) {
	payload := []byte("{\n  \"b\": 1, \"a\": [1,2,3],\n  \"a\": \"dup keys and spacing kept\"\n}")
	in := outbox.Envelope{
		ID:            "01ARZ3NDEKTSV4RRFFQ69G5FAV",
		Type:          "OrderCreated",
		Topic:         "orders",
		OccurredAt:    Start.Add(-time.Hour),
		AggregateType: "Order",
		AggregateID:   "order-42",
		TenantID:      "tenant-7",
		Headers:       map[string]string{"traceparent": "00-abc-def-01", "quote\"key": "ünïcødé <&>"},
		PayloadJSON:   payload,
	}
	raw := outbox.NewBytes("Blob", []byte{0, 1, 2, 0xff, 0})
	empty := outbox.NewBytes("Empty", []byte{})
	got := f.write(t, in, raw, empty)
	require.Equal(t, in.ID, got[0])

	e := f.get(t, in.ID)
	require.Equal(t, in.Type, e.Type)
	require.Equal(t, "orders", e.Topic)
	require.Equal(t, in.OccurredAt, e.OccurredAt.UTC())
	require.Equal(t, in.AggregateType, e.AggregateType)
	require.Equal(t, "order-42", e.AggregateID)
	require.Equal(t, "tenant-7", e.TenantID)
	require.Equal(t, in.Headers, e.Headers)
	require.True(t, e.IsJSON())
	require.Equal(t, payload, e.PayloadJSON, "JSON payload byte-identical")
	require.Equal(t, outbox.StatusNew, e.Status)
	require.Zero(t, e.Attempts)
	require.Equal(t, Start, e.CreatedAt.UTC())
	require.Equal(t, Start, e.AvailableAt.UTC())
	require.Equal(t, Start, e.UpdatedAt.UTC())
	require.True(t, e.DoneAt.IsZero())
	require.Empty(t, e.LastError)
	require.Empty(t, e.LockedBy)
	require.True(t, e.LockedAt.IsZero())
	require.True(t, e.LockedUntil.IsZero())
	require.NoError(t, e.Malformed)

	r := f.get(t, got[1])
	require.False(t, r.IsJSON())
	require.Equal(t, []byte{0, 1, 2, 0xff, 0}, r.PayloadBytes)
	require.Equal(t, outbox.GlobalAggregate, r.AggregateType)
	require.Equal(t, "Blob", r.Topic, "topic defaults to the event type")
	require.Empty(t, r.AggregateID)
	require.Empty(t, r.TenantID)
	require.Nil(t, r.Headers)
	row := f.getRow(t, got[1])
	require.Empty(t, row.Headers, "no headers are stored as NULL, read back as \"\"")

	require.NotNil(t, f.getRow(t, got[2]).Payload, "an empty payload is read back empty, not nil")
	require.NotNil(t, f.get(t, got[2]).PayloadBytes)
	require.Empty(t, f.get(t, got[2]).PayloadBytes)
}

func testInsertBatches[Tx any](t *testing.T, f *fixture[Tx]) {
	for _, n := range []int{0, 1, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			before := f.Count(t)
			events := JSONEvents(n, "")
			written := f.write(t, events...)
			require.Len(t, written, n)
			require.Equal(t, before+n, f.Count(t))
			if n > 0 {
				last := f.get(t, written[n-1])
				require.Equal(t, events[n-1].PayloadJSON, last.PayloadJSON)
				require.True(t, slices.IsSorted(written), "monotonic ULIDs keep the batch order")
			}
		})
	}
}

func testPayloadOfTheLargestSize[Tx any](t *testing.T, f *fixture[Tx]) {
	exact := bytes.Repeat([]byte{'x'}, outbox.MaxPayloadSize)
	id := f.write(t, outbox.NewBytes("Big", exact))[0]
	require.Equal(t, exact, f.get(t, id).PayloadBytes)
}

func testDuplicateEventID[Tx any](t *testing.T, f *fixture[Tx]) {
	e := JSONEvent(1)
	e.ID = "fixed-id"
	f.write(t, e)
	err := f.Store.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
		_, err := f.writer.Write(ctx, tx, JSONEvent(2), e)
		return err
	})
	require.ErrorIs(t, err, outbox.ErrDuplicateEvent)
	require.Equal(t, 1, f.Count(t), "nothing of the failed batch written")

	// A caller that ignores the error and commits anyway: PostgreSQL
	// refuses (the transaction is aborted), SQLite commits the transaction
	// without the batch. Either way no row of the batch is written. The
	// duplicate is reported by the write, or by the commit when the
	// transaction sends the write with it (PostgreSQL's InTx's).
	ctx := t.Context()
	tx, err := f.Tx.Begin(ctx)
	require.NoError(t, err)
	_, writeErr := f.writer.Write(ctx, tx, JSONEvent(3), e)
	commitErr := f.Tx.Commit(ctx, tx)
	if commitErr != nil {
		_ = f.Tx.Rollback(ctx, tx)
	}
	require.ErrorIs(t, errors.Join(writeErr, commitErr), outbox.ErrDuplicateEvent)
	require.Equal(t, 1, f.Count(t), "a failed batch is all or nothing")

	// The same with a hot path, whose events are written claimed and the
	// others not: the duplicate among the others undoes the claimed ones.
	hotWriter, _ := f.hotWriter(t, "relay-a", time.Minute)
	delayed := e
	delayed.DeliverAfter = Start.Add(time.Hour)
	commitErr = f.Store.InTx(ctx, func(ctx context.Context, tx Tx) error {
		_, writeErr = hotWriter.Write(ctx, tx, JSONEvent(4), delayed)
		return nil // and commit
	})
	require.ErrorIs(t, errors.Join(writeErr, commitErr), outbox.ErrDuplicateEvent)
	require.Equal(t, 1, f.Count(t), "no row of the batch written, claimed or not")
}

func testStatusTransitions[Tx any](t *testing.T, f *fixture[Tx]) {
	written := f.write(t, JSONEvent(1), JSONEvent(2), JSONEvent(3), JSONEvent(4))
	done, retried, died, deferred := written[0], written[1], written[2], written[3]
	require.Len(t, f.claim(t, request{Owner: "me"}), 4)

	f.Clock.Advance(time.Second)
	now := f.Clock.Now()
	// The longest error the engine stores, in characters of two bytes.
	long := strings.Repeat("é", codec.MaxErrorLen)
	require.EqualValues(t, 1, f.markDone(t, done))
	require.EqualValues(t, 3, f.record(t, "me",
		retry(retried, now.Add(time.Minute), long),
		dead(died, "poison"),
		deferral(deferred, now.Add(time.Hour), ""),
	))

	e := f.get(t, done)
	require.Equal(t, outbox.StatusDone, e.Status)
	require.Equal(t, now, e.DoneAt.UTC())
	require.Equal(t, now, e.UpdatedAt.UTC())
	require.Zero(t, e.Attempts)
	require.Empty(t, e.LockedBy)
	require.True(t, e.LockedAt.IsZero())
	require.True(t, e.LockedUntil.IsZero())

	e = f.get(t, retried)
	require.Equal(t, outbox.StatusRetry, e.Status)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, now.Add(time.Minute), e.AvailableAt.UTC())
	require.Equal(t, now, e.UpdatedAt.UTC())
	require.Equal(t, long, e.LastError, "an error of 4000 characters stored whole")
	require.Empty(t, e.LockedBy)
	require.True(t, e.LockedUntil.IsZero())
	require.True(t, e.DoneAt.IsZero())

	e = f.get(t, died)
	require.Equal(t, outbox.StatusDead, e.Status)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, "poison", e.LastError)
	require.Equal(t, Start, e.AvailableAt.UTC(), "an outcome without a next time keeps the due time")
	require.Empty(t, e.LockedBy)

	e = f.get(t, deferred)
	require.Equal(t, outbox.StatusNew, e.Status, "a deferral keeps the status")
	require.Zero(t, e.Attempts, "a deferral spends no attempt")
	require.Equal(t, now.Add(time.Hour), e.AvailableAt.UTC())
	require.Empty(t, e.LastError, "a deferral without a reason writes no error")
	require.Empty(t, e.LockedBy)

	// Idempotence, and DONE is final, for its owner or from no owner: the
	// DONE row holds no claim that would stop an outcome.
	f.Clock.Advance(time.Second)
	require.Zero(t, f.markDone(t, done))
	for _, owner := range []string{"me", ""} {
		for _, late := range []outboxdriver.Outcome{retry(done, now, "late"), dead(done, "late"), deferral(done, now, "late")} {
			require.Zero(t, f.record(t, owner, late), "status %d from %q on a DONE row", late.Status, owner)
		}
	}
	e = f.get(t, done)
	require.Equal(t, outbox.StatusDone, e.Status)
	require.Zero(t, e.Attempts)
	require.Equal(t, now, e.DoneAt.UTC(), "a DONE row is never rewritten")
	require.Equal(t, now, e.UpdatedAt.UTC())
	require.Empty(t, e.LastError)

	// The relay's claim ended with its first outcome: the same RETRY sent
	// again (a statement retried after a timeout) spends no second attempt.
	require.Zero(t, f.record(t, "me", retry(retried, now.Add(2*time.Minute), "again")))
	require.Equal(t, 1, f.get(t, retried).Attempts)
	// Without an owner, an outcome applies to any event under no lease.
	require.EqualValues(t, 1, f.record(t, "", retry(retried, now.Add(2*time.Minute), "again")))
	e = f.get(t, retried)
	require.Equal(t, 2, e.Attempts)
	require.Equal(t, "again", e.LastError)
	// An error of "" keeps the one stored.
	require.EqualValues(t, 1, f.record(t, "", retry(retried, now.Add(2*time.Minute), "")))
	e = f.get(t, retried)
	require.Equal(t, 3, e.Attempts)
	require.Equal(t, "again", e.LastError)

	// A DONE after failures, whoever holds the row.
	doneAt := f.Clock.Now()
	require.EqualValues(t, 1, f.markDone(t, retried))
	e = f.get(t, retried)
	require.Equal(t, outbox.StatusDone, e.Status)
	require.Equal(t, doneAt, e.DoneAt.UTC())
	require.Equal(t, 3, e.Attempts, "a success spends no attempt")
	require.Equal(t, "again", e.LastError, "the last failure stays readable after success")
	require.Equal(t, now.Add(2*time.Minute), e.AvailableAt.UTC(), "a success keeps the due time")

	require.Zero(t, f.markDone(t, "no-such-event"))
	require.Zero(t, f.record(t, "me", retry("no-such-event", now, "x")))
}

// An outcome counts only from the relay that holds the event: a relay
// slower than its lease, whose event another relay claimed since, or whose
// event went DEAD, must not clear the other's lease, revive the event, or
// spend its attempts. DONE is the exception: the event was delivered.
func testStaleOutcomesChangeNothing[Tx any](t *testing.T, f *fixture[Tx]) {
	written := f.write(t, JSONEvent(1), JSONEvent(2), JSONEvent(3), JSONEvent(4))
	retried, died, deferred, delivered := written[0], written[1], written[2], written[3]
	require.Len(t, f.claim(t, request{Owner: "slow", Lease: time.Minute}), 4)
	f.Clock.Advance(2 * time.Minute)
	require.Len(t, f.claim(t, request{Owner: "b", Lease: time.Minute}), 4)

	now := f.Clock.Now()
	late := []outboxdriver.Outcome{
		retry(retried, now.Add(time.Hour), "late"),
		dead(died, "late"),
		deferral(deferred, now.Add(time.Hour), "late"),
	}
	for _, owner := range []string{"slow", ""} {
		require.Zero(t, f.record(t, owner, late...), "outcomes from %q while b's lease runs", owner)
	}
	for _, id := range written[:3] {
		e := f.get(t, id)
		require.Equal(t, outbox.StatusNew, e.Status)
		require.Zero(t, e.Attempts)
		require.Empty(t, e.LastError)
		require.Equal(t, "b", e.LockedBy, "b's lease holds")
		require.Equal(t, now.Add(time.Minute), e.LockedUntil.UTC())
	}

	// DEAD stays DEAD until replayed, whoever sends a late outcome.
	require.EqualValues(t, 1, f.record(t, "b", dead(died, "poison")))
	for _, owner := range []string{"b", "slow", ""} {
		for _, o := range []outboxdriver.Outcome{retry(died, now, "late"), deferral(died, now, ""), dead(died, "late")} {
			require.Zero(t, f.record(t, owner, o), "status %d from %q after DEAD", o.Status, owner)
		}
	}
	e := f.get(t, died)
	require.Equal(t, outbox.StatusDead, e.Status)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, "poison", e.LastError)

	// A lease that ran out still lets its owner record, as long as no other
	// relay claimed the event since; without an owner, so does any lease
	// that ran out.
	f.Clock.Advance(2 * time.Minute)
	require.Zero(t, f.record(t, "slow", late[0]), "b claimed it after slow")
	require.EqualValues(t, 1, f.record(t, "b", late[0]), "b's own lease, run out")
	require.EqualValues(t, 1, f.record(t, "", late[2]), "no running lease")
	require.Equal(t, now.Add(time.Hour), f.get(t, deferred).AvailableAt.UTC())

	// A late success is recorded: the event was delivered.
	require.EqualValues(t, 2, f.markDone(t, delivered, died))
	require.Equal(t, outbox.StatusDone, f.get(t, delivered).Status)
	require.Equal(t, outbox.StatusDone, f.get(t, died).Status)
}

// An outcome that says which attempt it reports applies once: written
// again (its statement sent again after the reply was lost), it neither
// counts the attempt twice nor ends the claim its owner has made since.
// One that does not say is applied as before.
func testOutcomeWrittenTwiceCountsOnce[Tx any](t *testing.T, f *fixture[Tx]) {
	written := f.write(t, JSONEvent(1), JSONEvent(2), JSONEvent(3))
	retried, died, unchecked := written[0], written[1], written[2]
	require.Len(t, f.claim(t, request{Owner: "me", Lease: time.Minute}), 3)
	now := f.Clock.Now()
	outcomes := []outboxdriver.Outcome{
		checked(retry(retried, now.Add(time.Second), "failed"), 0),
		checked(dead(died, "failed"), 0),
		retry(unchecked, now, "failed"),
	}
	require.EqualValues(t, 3, f.record(t, "me", outcomes...))

	f.Clock.Advance(2 * time.Second)
	require.ElementsMatch(t, []string{retried, unchecked},
		f.claim(t, request{Owner: "me", Lease: time.Minute}), "due again, and claimed again by me")
	require.EqualValues(t, 1, f.record(t, "me", outcomes...), "only the outcome that does not say its attempt is applied again")

	e := f.get(t, retried)
	require.Equal(t, outbox.StatusRetry, e.Status)
	require.Equal(t, 1, e.Attempts, "one failure, counted once")
	require.Equal(t, "me", e.LockedBy, "the newer claim holds")
	e = f.get(t, died)
	require.Equal(t, outbox.StatusDead, e.Status)
	require.Equal(t, 1, e.Attempts)
	e = f.get(t, unchecked)
	require.Equal(t, 2, e.Attempts, "unchecked: applied to the newer claim too")
	require.Empty(t, e.LockedBy)

	// The next attempt's outcome is recorded.
	require.EqualValues(t, 1, f.record(t, "me", checked(retry(retried, now.Add(time.Second), "failed"), 1)))
	require.Equal(t, 2, f.get(t, retried).Attempts)
}

// A store configured to delete delivered events deletes the rows of DONE
// outcomes, RETRY ones included, records every other outcome as usual,
// and leaves rows that were DONE already alone.
func testDeleteDoneDeletesOnlyDeliveredEvents[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	del := f.DeleteDone.Driver()
	written := f.write(t, JSONEvent(1), JSONEvent(2), JSONEvent(3), JSONEvent(4), JSONEvent(5), JSONEvent(6))
	delivered, retried, died, deferred, doneBefore, lateSuccess := written[0], written[1], written[2], written[3], written[4], written[5]
	require.Len(t, f.claim(t, request{Owner: "me"}), 6)
	require.EqualValues(t, 1, f.markDone(t, doneBefore))
	require.EqualValues(t, 1, f.recordBy(t, del, "me", retry(lateSuccess, Start, "first")))

	f.Clock.Advance(time.Second)
	now := f.Clock.Now()
	require.EqualValues(t, 2, f.markDoneBy(t, del, delivered, doneBefore, lateSuccess),
		"one row deleted for each DONE outcome; the DONE row untouched")
	require.EqualValues(t, 3, f.recordBy(t, del, "me",
		retry(retried, now.Add(time.Minute), "refused"),
		dead(died, "poison"),
		deferral(deferred, now.Add(time.Hour), ""),
	))
	require.Equal(t, 4, f.Count(t))
	for _, id := range []string{delivered, lateSuccess} {
		_, err := f.DeleteDone.Get(ctx, id)
		require.ErrorIs(t, err, outbox.ErrNotFound, "a delivered event is deleted")
	}

	e := f.get(t, retried)
	require.Equal(t, outbox.StatusRetry, e.Status)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, "refused", e.LastError)
	require.Equal(t, now.Add(time.Minute), e.AvailableAt.UTC())
	require.Empty(t, e.LockedBy)
	e = f.get(t, died)
	require.Equal(t, outbox.StatusDead, e.Status)
	require.Equal(t, "poison", e.LastError)
	e = f.get(t, deferred)
	require.Equal(t, outbox.StatusNew, e.Status)
	require.Equal(t, now.Add(time.Hour), e.AvailableAt.UTC())
	e = f.get(t, doneBefore)
	require.Equal(t, outbox.StatusDone, e.Status, "a row DONE already is left to Purge")
	require.Equal(t, Start, e.DoneAt.UTC())

	// Recording again is harmless, and only DONE outcomes delete.
	require.Zero(t, f.markDoneBy(t, del, delivered, doneBefore))
	require.EqualValues(t, 1, f.recordBy(t, del, "", retry(retried, now, "again")))
	require.Equal(t, 2, f.get(t, retried).Attempts)
	require.EqualValues(t, 2, f.markDoneBy(t, del, retried, died))
	require.Equal(t, 2, f.Count(t), "the deferred event and the DONE row are left")
}

func testDelayedEventsInvisibleUntilDue[Tx any](t *testing.T, f *fixture[Tx]) {
	delayed := JSONEvent(1)
	delayed.DeliverAfter = Start.Add(10 * time.Second)
	id := f.write(t, delayed)[0]
	require.Equal(t, delayed.DeliverAfter, f.get(t, id).AvailableAt.UTC())

	req := request{Owner: "me"}
	require.Empty(t, f.claim(t, req))
	f.Clock.Advance(9 * time.Second)
	require.Empty(t, f.claim(t, req))
	f.Clock.Advance(time.Second)
	require.Equal(t, []string{id}, f.claim(t, req))
}

func testRetryAndDeferredDueAgainAtNextTime[Tx any](t *testing.T, f *fixture[Tx]) {
	written := f.write(t, JSONEvent(1), JSONEvent(2))
	require.EqualValues(t, 2, f.record(t, "",
		retry(written[0], Start.Add(time.Second), "down"),
		deferral(written[1], Start.Add(2*time.Second), "")))
	req := request{Owner: "me"}
	require.Empty(t, f.claim(t, req))
	f.Clock.Advance(time.Second)
	require.Equal(t, written[:1], f.claim(t, req))
	f.Clock.Advance(time.Second)
	require.Equal(t, written[1:], f.claim(t, req))
	require.Zero(t, f.get(t, written[1]).Attempts)
}

func testClaimLocksAndExpires[Tx any](t *testing.T, f *fixture[Tx]) {
	written := f.write(t, JSONEvent(1), JSONEvent(2), JSONEvent(3))

	a := f.claimRows(t, request{Owner: "a", Limit: 2, Lease: 30 * time.Second})
	require.Equal(t, written[:2], IDs(a), "due order, limit honoured")
	for _, r := range a {
		require.Equal(t, "a", r.LockedBy)
		require.Equal(t, Start, r.LockedAt.UTC())
		require.Equal(t, Start.Add(30*time.Second), r.LockedUntil.UTC(), "the lease end")
		require.Equal(t, Start, r.AvailableAt.UTC(), "a claim leaves the due time alone")
		require.Equal(t, r, f.getRow(t, r.ID), "the claim returns the rows as stored")
	}
	b := f.claim(t, request{Owner: "b", Lease: 30 * time.Second})
	require.Equal(t, written[2:], b, "fresh claims are not taken")

	f.Clock.Advance(29 * time.Second)
	require.Empty(t, f.claim(t, request{Owner: "c", Lease: 30 * time.Second}),
		"claims younger than the lock timeout hold")

	f.Clock.Advance(time.Second)
	c := f.claim(t, request{Owner: "c", Lease: 30 * time.Second})
	require.Equal(t, written, c, "expired claims are taken over")
	e := f.get(t, written[0])
	require.Equal(t, "c", e.LockedBy)
	require.Equal(t, Start.Add(30*time.Second), e.LockedAt.UTC())
	require.Equal(t, Start.Add(time.Minute), e.LockedUntil.UTC())
	require.Equal(t, outbox.StatusNew, e.Status, "a claim changes no status")
	require.Zero(t, e.Attempts, "nor the attempts")
}

func testReleaseLetsOthersClaimAtOnce[Tx any](t *testing.T, f *fixture[Tx]) {
	written := f.write(t, JSONEvent(1), JSONEvent(2))
	require.Len(t, f.claim(t, request{Owner: "a"}), 2)

	require.Zero(t, f.release(t, "not-the-owner", written...))
	require.Zero(t, f.release(t, "a"))
	f.Clock.Advance(time.Second)
	require.EqualValues(t, 1, f.release(t, "a", written[:1]...))

	e := f.get(t, written[0])
	require.Empty(t, e.LockedBy)
	require.True(t, e.LockedAt.IsZero())
	require.True(t, e.LockedUntil.IsZero())
	require.Equal(t, Start, e.AvailableAt.UTC(), "due at once, at the time it was due before")
	require.Equal(t, written[:1], f.claim(t, request{Owner: "b"}))

	require.EqualValues(t, 1, f.markDone(t, written[1]))
	require.Zero(t, f.release(t, "a", written[1:]...), "finished events have no claim to release")
}

// A relay started again under its owner hands back the claims its earlier
// run held on its topic: only those, made before it started, and pending.
func testReleaseOwnedHandsBackAnEarlierRunsClaims[Tx any](t *testing.T, f *fixture[Tx]) {
	orders := f.write(t, JSONEvents(4, "orders")...)
	other := f.write(t, JSONEvents(1, "billing")...)
	require.Len(t, f.claim(t, request{Owner: "relay-1", Limit: 2, Topic: "orders"}), 2)
	require.Len(t, f.claim(t, request{Owner: "relay-2", Limit: 1, Topic: "orders"}), 1)
	require.Len(t, f.claim(t, request{Owner: "relay-1", Topic: "billing"}), 1)
	require.EqualValues(t, 1, f.markDone(t, orders[1]))
	restarted := f.Clock.Advance(time.Second)
	f.Clock.Advance(time.Second)
	require.Len(t, f.claim(t, request{Owner: "relay-1", Topic: "orders"}), 1, "the restarted run's own claim")

	n, err := f.driver.ReleaseOwned(t.Context(), outboxdriver.ReleaseOwnedParams{Owner: "relay-1", Topic: "orders", ClaimedBefore: restarted})
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the earlier run's pending claim on orders, not its DONE event, relay-2's, billing's or the new run's")
	e := f.get(t, orders[0])
	require.Empty(t, e.LockedBy)
	require.True(t, e.LockedUntil.IsZero())
	require.Equal(t, Start, e.AvailableAt.UTC(), "due at once, at the time it was due before")
	require.Equal(t, "relay-2", f.get(t, orders[2]).LockedBy)
	require.Equal(t, "relay-1", f.get(t, orders[3]).LockedBy)
	require.Equal(t, "relay-1", f.get(t, other[0]).LockedBy)
	require.Equal(t, orders[:1], f.claim(t, request{Owner: "relay-3", Topic: "orders"}))
}

// An event whose claim ends, released or run out, is due again where it
// was in due order, ahead of events that became due while it was claimed.
func testClaimEndKeepsDueOrder[Tx any](t *testing.T, f *fixture[Tx]) {
	first := f.write(t, JSONEvent(1), JSONEvent(2))
	require.Equal(t, first, f.claim(t, request{Owner: "a", Lease: time.Minute}))
	f.Clock.Advance(time.Second)
	later := f.write(t, JSONEvent(3))
	f.Clock.Advance(time.Second)

	require.EqualValues(t, 1, f.release(t, "a", first[1:]...))
	require.Equal(t, first[1:], f.claim(t, request{Owner: "b", Limit: 1}),
		"the released event comes before the one written after it")
	require.EqualValues(t, 1, f.markDone(t, first[1]))

	f.Clock.Advance(time.Minute)
	require.Equal(t, first[:1], f.claim(t, request{Owner: "c", Limit: 1}),
		"so does the event whose lease ran out")
	require.Equal(t, later, f.claim(t, request{Owner: "c"}))
}

func testClaimSkipsRecentEvents[Tx any](t *testing.T, f *fixture[Tx]) {
	old := f.write(t, JSONEvent(1))
	f.Clock.Advance(time.Second)
	recent := f.write(t, JSONEvent(2))

	require.Equal(t, old, f.claim(t, request{Owner: "me", SkipRecent: time.Second}), "written no later than a second ago")
	require.Empty(t, f.claim(t, request{Owner: "you", SkipRecent: 500 * time.Millisecond}),
		"the recent event is left out, the old one is leased")
	require.Equal(t, recent, f.claim(t, request{Owner: "you"}))
}

// testClaimTakesRecentRetries checks that the written-before bound is for
// the NEW events due at once alone: a relay in log mode leaves to its feed
// the NEW events the feed still holds, and must claim the retries of
// those it delivered, and the events it leaves for later.
func testClaimTakesRecentRetries[Tx any](t *testing.T, f *fixture[Tx]) {
	for _, ordered := range []bool{false, true} {
		e := JSONEvent(1)
		e.AggregateID = "retried"
		ids := f.write(t, e, e)
		require.EqualValues(t, 1, f.record(t, "", retry(ids[0], f.Clock.Now(), "failed")))
		scheduled := JSONEvent(2)
		scheduled.DeliverIn = time.Millisecond
		ids = append(ids, f.write(t, scheduled)...)
		f.Clock.Advance(time.Millisecond)
		bound := request{Owner: "me", SkipRecent: time.Hour, Ordered: ordered, RunLength: 2}
		require.ElementsMatch(t, []string{ids[0], ids[2]}, f.claim(t, bound),
			"ordered %v: the retry and the scheduled event are taken, the NEW event behind the retry is not", ordered)
		require.EqualValues(t, 3, f.markDone(t, ids...))
	}
}

func testClaimByTopic[Tx any](t *testing.T, f *fixture[Tx]) {
	mk := func(topic string) outbox.Envelope {
		e := JSONEvent(0)
		e.Topic = topic
		return e
	}
	written := f.write(t, mk("a"), mk("b"), mk("c"), mk("a"))

	require.Empty(t, f.claim(t, request{Owner: "x", Topic: "zzz"}))
	require.Equal(t, []string{written[0], written[3]}, f.claim(t, request{Owner: "x", Topic: "a"}))
	require.Equal(t, []string{written[1]}, f.claim(t, request{Owner: "x", Topic: "b"}))
	require.Equal(t, []string{written[2]}, f.claim(t, request{Owner: "x", Topic: "c"}))
}

// A claim takes the earliest due rows first: a retried event is due after
// a newer one that came due before it, whatever their ids.
func testClaimTakesTheEarliestDueFirst[Tx any](t *testing.T, f *fixture[Tx]) {
	older := f.write(t, JSONEvent(1))[0]
	f.Clock.Advance(time.Second)
	newer := f.write(t, JSONEvent(2))[0]
	require.EqualValues(t, 1, f.record(t, "", retry(older, f.Clock.Now().Add(time.Second), "down")))
	f.Clock.Advance(2 * time.Second)

	require.Equal(t, []string{newer}, f.claim(t, request{Owner: "me", Limit: 1}), "the retried event is due after the newer one")
	require.Equal(t, []string{older}, f.claim(t, request{Owner: "me", Limit: 1}))
}

// A run of claims that share a cursor takes every event once, in due
// order; an event that became due behind the cursor is claimed once the
// cursor is reset (a driver may or may not take it before).
func testClaimCursorCoversTheBacklogOnce[Tx any](t *testing.T, f *fixture[Tx]) {
	written := f.write(t, JSONEvent(1), JSONEvent(2), JSONEvent(3), JSONEvent(4), JSONEvent(5))
	cur := &cursor{}
	req := request{Owner: "me", Limit: 2, Cursor: cur}
	var claimed []string
	for range 3 {
		claimed = append(claimed, f.claim(t, req)...)
	}
	require.Equal(t, written, claimed)
	require.Empty(t, f.claim(t, req))

	// Released at the time it was first due: behind the cursor.
	require.EqualValues(t, 1, f.release(t, "me", written[:1]...))
	cur.reset()
	require.Equal(t, written[:1], f.claim(t, req))
}

// orderedEvent is an event of topic and aggregate, with id.
func orderedEvent(id, topic, aggregateType, aggregateID string) outbox.Envelope {
	e := JSONEvent(0)
	e.ID, e.Topic, e.AggregateType, e.AggregateID = id, topic, outbox.AggregateType(aggregateType), aggregateID
	return e
}

func testOrderedClaimTakesOneEventPerAggregateInWriteOrder[Tx any](t *testing.T, f *fixture[Tx]) {
	// One transaction each, in this order. The ids of order 1's events run
	// backwards: write order decides, not the id, which orders the claim.
	f.write(t, orderedEvent("o1-first", "orders", "Order", "1"))
	f.write(t, orderedEvent("b-order2", "orders", "Order", "2"))
	f.write(t, orderedEvent("a-no-aggregate", "orders", "Order", ""))
	f.write(t, orderedEvent("c-customer1", "orders", "Customer", "1"))
	f.write(t, orderedEvent("d-shipping", "shipping", "Order", "1"))
	f.write(t, orderedEvent("o1-second", "orders", "Order", "1"))
	f.write(t, orderedEvent("o1-a-third", "orders", "Order", "1"))

	lease := time.Minute
	req := request{Owner: "r", Lease: lease, Topic: "orders", Ordered: true}
	claim := func(msg string, want ...string) {
		t.Helper()
		require.ElementsMatch(t, want, f.claim(t, req), msg)
	}
	claim("the first event of each aggregate; one without an aggregate id is not ordered",
		"o1-first", "b-order2", "a-no-aggregate", "c-customer1")
	claim("an event in flight holds back the rest of its aggregate")

	record := func(o outboxdriver.Outcome) {
		t.Helper()
		require.EqualValues(t, 1, f.record(t, "r", o))
	}
	done := func(id string) {
		t.Helper()
		require.EqualValues(t, 1, f.markDone(t, id))
	}
	for _, id := range []string{"b-order2", "a-no-aggregate", "c-customer1"} {
		done(id)
	}
	record(checked(retry("o1-first", Start.Add(time.Minute), "broker down"), 0))
	claim("so does one waiting for its retry")
	f.Clock.Advance(time.Minute)
	claim("the retry comes first", "o1-first")
	record(checked(dead("o1-first", "poison"), 1))
	claim("a DEAD event holds back the rest of its aggregate")
	n, err := f.Store.ReplayDead(t.Context(), outbox.DeadFilter{IDs: []string{"o1-first"}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	claim("until it is replayed, and delivered first", "o1-first")
	done("o1-first")
	claim("then the next in write order", "o1-second")
	f.Clock.Advance(lease)
	claim("a lease run out gives the same event again", "o1-second")
	done("o1-second")
	claim("then the next", "o1-a-third")

	req.Topic, req.Ordered = "shipping", false
	f.write(t, orderedEvent("e-shipping", "shipping", "Order", "1"))
	claim("an unordered claim takes every due event", "d-shipping", "e-shipping")
}

// The same aggregate in two topics is two sequences.
func testOrderedClaimKeepsTopicsApart[Tx any](t *testing.T, f *fixture[Tx]) {
	for _, id := range []string{"x1", "y1", "x2", "y2"} {
		f.write(t, orderedEvent(id, id[:1], "Order", "1"))
	}
	req := request{Owner: "r", Ordered: true}
	claim := func(topic string) []string {
		t.Helper()
		req.Topic = topic
		return f.claim(t, req)
	}
	require.Equal(t, []string{"x1"}, claim("x"))
	require.Equal(t, []string{"y1"}, claim("y"), "the first of y's aggregate, though x's is in flight")
	require.EqualValues(t, 1, f.markDone(t, "x1"))
	require.Equal(t, []string{"x2"}, claim("x"))
	require.Empty(t, claim("y"), "y2 waits for y1")
}

// An ordered claim that names aggregates takes the first event of each
// when it is due, and never an event that waits for an earlier one of its
// aggregate. Drivers that do not narrow such claims may take the first
// events of other aggregates too.
func testOrderedClaimOfNamedAggregates[Tx any](t *testing.T, f *fixture[Tx]) {
	for _, e := range []outbox.Envelope{orderedEvent("o1-first", "orders", "Order", "1"), orderedEvent("o2-first", "orders", "Order", "2"),
		orderedEvent("c1-first", "orders", "Customer", "1"), orderedEvent("o1-second", "orders", "Order", "1")} {
		f.write(t, e)
	}
	order1 := outboxdriver.Aggregate{Topic: "orders", Type: "Order", ID: "1"}
	req := request{Owner: "r", Topic: "orders", Ordered: true, Aggregates: []outboxdriver.Aggregate{order1}}
	heads := []string{"o1-first", "o2-first", "c1-first"}
	claimed := f.claim(t, req)
	require.Contains(t, claimed, "o1-first")
	require.Subset(t, heads, claimed, "only first events")
	claimed = append(claimed, f.claim(t, req)...)
	require.NotContains(t, claimed, "o1-second", "the first event of its aggregate is in flight")
	require.EqualValues(t, 1, f.markDone(t, "o1-first"))
	require.Contains(t, f.claim(t, req), "o1-second", "the next once the first is DONE")
}

// runs returns the ids of rows by aggregate id (the event id for rows
// without one), each run in its RunIndex order, checking that the indexes
// count from 0 without a gap.
func runs(t *testing.T, rows []outboxdriver.Row) map[string][]string {
	t.Helper()
	byIndex := map[string]map[int]string{}
	for _, r := range rows {
		key := cmp.Or(r.AggregateID, r.ID)
		if byIndex[key] == nil {
			byIndex[key] = map[int]string{}
		}
		require.NotContains(t, byIndex[key], r.RunIndex, "two rows of %s at %d", key, r.RunIndex)
		byIndex[key][r.RunIndex] = r.ID
	}
	out := map[string][]string{}
	for key, ids := range byIndex {
		for i := range len(ids) {
			require.Contains(t, ids, i, "the run of %s has a gap", key)
			out[key] = append(out[key], ids[i])
		}
	}
	return out
}

// An ordered claim with runs takes, with the first event of each
// aggregate, the events after it in write order, up to the run length; a
// run's events hold the aggregate as its head does.
func testOrderedClaimTakesRuns[Tx any](t *testing.T, f *fixture[Tx]) {
	// One transaction each, in this order; ids run backwards within an
	// aggregate: the write order decides.
	for _, e := range []outbox.Envelope{orderedEvent("a9", "orders", "Order", "A"), orderedEvent("b9", "orders", "Order", "B"),
		orderedEvent("a8", "orders", "Order", "A"), orderedEvent("keyless", "orders", "Order", ""),
		orderedEvent("a7", "orders", "Order", "A"), orderedEvent("b8", "orders", "Order", "B"),
		orderedEvent("a6", "orders", "Order", "A"), orderedEvent("a5", "orders", "Order", "A")} {
		f.write(t, e)
	}
	req := request{Owner: "r", Topic: "orders", Ordered: true, RunLength: 3}
	claim := func(req request) map[string][]string {
		t.Helper()
		return runs(t, f.claimRows(t, req))
	}
	require.Equal(t, map[string][]string{"A": {"a9", "a8", "a7"}, "B": {"b9", "b8"}, "keyless": {"keyless"}}, claim(req),
		"each aggregate's first events in write order, up to the run length; an event without an aggregate has no run")
	require.Empty(t, claim(req), "a6 waits behind the leased run")
	require.EqualValues(t, 2, f.markDone(t, "a9", "a8"))
	require.Empty(t, claim(req), "the first event not DONE is leased: the aggregate is held")
	require.EqualValues(t, 1, f.release(t, "r", "a7"))
	require.Equal(t, map[string][]string{"A": {"a7", "a6", "a5"}}, claim(req), "released, the run goes on from it")

	// RunRows: every run's k-th event before any run's (k+1)-th.
	for _, e := range []outbox.Envelope{orderedEvent("x1", "rows", "Order", "X"), orderedEvent("y1", "rows", "Order", "Y"),
		orderedEvent("x2", "rows", "Order", "X"), orderedEvent("x3", "rows", "Order", "X"), orderedEvent("y2", "rows", "Order", "Y"),
		orderedEvent("y3", "rows", "Order", "Y")} {
		f.write(t, e)
	}
	rows := f.claimRows(t, request{Owner: "r", Topic: "rows", Ordered: true, Limit: 2, RunLength: 3, RunRows: 5})
	require.LessOrEqual(t, len(rows), 5, "at most RunRows")
	got := runs(t, rows)
	require.Equal(t, []string{"x1"}, got["X"][:1])
	require.Equal(t, []string{"y1"}, got["Y"][:1])
	if len(rows) == 5 {
		require.Equal(t, map[string][]string{"X": {"x1", "x2", "x3"}, "Y": {"y1", "y2"}}, got)
	}
}

// A run stops before the first event that is not due: leased, waiting for
// a retry, DEAD or scheduled for later; the events after it wait.
func testOrderedRunStopsBeforeWhatIsNotDue[Tx any](t *testing.T, f *fixture[Tx]) {
	later := orderedEvent("l2", "later", "Order", "L")
	later.DeliverAfter = Start.Add(time.Hour)
	for _, e := range []outbox.Envelope{
		orderedEvent("c1", "claimed", "Order", "C"), orderedEvent("c2", "claimed", "Order", "C"), orderedEvent("c3", "claimed", "Order", "C"),
		orderedEvent("r1", "retried", "Order", "R"), orderedEvent("r2", "retried", "Order", "R"), orderedEvent("r3", "retried", "Order", "R"),
		orderedEvent("d1", "dead", "Order", "D"), orderedEvent("d2", "dead", "Order", "D"), orderedEvent("d3", "dead", "Order", "D"),
		orderedEvent("l1", "later", "Order", "L"), later, orderedEvent("l3", "later", "Order", "L"),
	} {
		f.write(t, e)
	}
	// The second event of each is claimed by an unordered claim, as a
	// relay that is not ordered would, and then retried or made DEAD.
	for _, topic := range []string{"claimed", "retried", "dead"} {
		require.Len(t, f.claim(t, request{Owner: "u", Topic: topic, Limit: 2}), 2)
		first := topic[:1] + "1"
		require.EqualValues(t, 1, f.release(t, "u", first))
	}
	require.EqualValues(t, 1, f.record(t, "u", retry("r2", Start.Add(time.Minute), "broker down")))
	require.EqualValues(t, 1, f.record(t, "u", dead("d2", "poison")))
	for topic, want := range map[string]string{"claimed": "c1", "retried": "r1", "dead": "d1", "later": "l1"} {
		req := request{Owner: "r", Topic: topic, Ordered: true, RunLength: 10}
		require.Equal(t, []string{want}, f.claim(t, req), "the run of %s stops before its second event", topic)
		require.Empty(t, f.claim(t, req), "%s: nothing behind a leased head", topic)
	}
	f.Clock.Advance(time.Minute)
	require.EqualValues(t, 1, f.markDone(t, "r1"))
	require.Equal(t, map[string][]string{"R": {"r2", "r3"}}, runs(t, f.claimRows(t, request{Owner: "r", Topic: "retried", Ordered: true, RunLength: 10})),
		"a retry due is a head like any other")
}

// A claim that names aggregates takes their runs too.
func testOrderedRunsOfNamedAggregates[Tx any](t *testing.T, f *fixture[Tx]) {
	for _, e := range []outbox.Envelope{orderedEvent("o1-first", "orders", "Order", "1"), orderedEvent("o1-second", "orders", "Order", "1"),
		orderedEvent("o1-third", "orders", "Order", "1")} {
		f.write(t, e)
	}
	order1 := outboxdriver.Aggregate{Topic: "orders", Type: "Order", ID: "1"}
	req := request{Owner: "r", Topic: "orders", Ordered: true, Aggregates: []outboxdriver.Aggregate{order1}, RunLength: 2}
	require.Equal(t, map[string][]string{"1": {"o1-first", "o1-second"}}, runs(t, f.claimRows(t, req)))
	require.Empty(t, f.claim(t, req), "the third waits behind the run")
	require.EqualValues(t, 2, f.markDone(t, "o1-first", "o1-second"))
	require.Equal(t, []string{"o1-third"}, f.claim(t, req))
}

func testDeadEventsQueryCountReplay[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	mk := func(typ outbox.EventType, topic string) outbox.Envelope {
		return outbox.Envelope{Type: typ, Topic: topic, PayloadJSON: []byte(`{}`)}
	}
	written := f.write(t, mk("A", "t1"), mk("A", "t2"), mk("B", "t1"), mk("A", "t1"), mk("A", "t1"))
	require.EqualValues(t, 2, f.record(t, "", dead(written[0], "e0"), dead(written[1], "e1")))
	f.Clock.Advance(time.Hour)
	require.EqualValues(t, 2, f.record(t, "", dead(written[2], "e2"), dead(written[3], "e3")))
	// written[4] stays NEW.

	count := func(filter outbox.DeadFilter) int64 {
		n, err := f.Store.CountDead(ctx, filter)
		require.NoError(t, err)
		return n
	}
	require.EqualValues(t, 4, count(outbox.DeadFilter{}))
	require.EqualValues(t, 3, count(outbox.DeadFilter{EventType: "A"}))
	require.EqualValues(t, 2, count(outbox.DeadFilter{EventType: "A", Topic: "t1"}))
	require.EqualValues(t, 2, count(outbox.DeadFilter{DiedBefore: Start.Add(time.Minute)}))
	require.EqualValues(t, 1, count(outbox.DeadFilter{IDs: []string{written[1], written[4]}}))

	var paged []string
	q := outbox.DeadQuery{Limit: 3}
	for {
		page, err := f.Store.QueryDead(ctx, q)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		require.LessOrEqual(t, len(page), 3)
		paged = append(paged, IDs(page)...)
		q.After = page[len(page)-1].ID
	}
	require.Equal(t, written[:4], paged)

	page, err := f.Store.QueryDead(ctx, outbox.DeadQuery{DeadFilter: outbox.DeadFilter{EventType: "B"}})
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, "e2", page[0].LastError)
	require.Equal(t, 1, page[0].Attempts)
	require.Equal(t, outbox.StatusDead, page[0].Status)
	require.Equal(t, f.get(t, page[0].ID), page[0], "a query reads rows as Get does")
	page, err = f.Store.QueryDead(ctx, outbox.DeadQuery{DeadFilter: outbox.DeadFilter{IDs: written[1:2], Topic: "t2"}})
	require.NoError(t, err)
	require.Equal(t, written[1:2], IDs(page))
	page, err = f.Store.QueryDead(ctx, outbox.DeadQuery{DeadFilter: outbox.DeadFilter{DiedBefore: Start.Add(time.Minute)}})
	require.NoError(t, err)
	require.Equal(t, written[:2], IDs(page))

	f.Clock.Advance(time.Minute)
	n, err := f.Store.ReplayDead(ctx, outbox.DeadFilter{EventType: "A", Topic: "t1"})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	e := f.get(t, written[0])
	require.Equal(t, outbox.StatusNew, e.Status)
	require.Zero(t, e.Attempts)
	require.Equal(t, "e0", e.LastError, "replay keeps the error as history")
	require.Equal(t, f.Clock.Now(), e.AvailableAt.UTC())
	require.Equal(t, f.Clock.Now(), e.UpdatedAt.UTC())
	require.True(t, e.DoneAt.IsZero())
	require.Empty(t, e.LockedBy)
	require.EqualValues(t, 2, count(outbox.DeadFilter{}))

	require.ElementsMatch(t, []string{written[0], written[3], written[4]}, f.claim(t, request{Owner: "me", Topic: "t1"}),
		"replayed events are due again")
}

// writeDead writes n events and kills them all.
func (f *fixture[Tx]) writeDead(t *testing.T, n int) []string {
	t.Helper()
	written := f.write(t, JSONEvents(n, "")...)
	outcomes := make([]outboxdriver.Outcome, len(written))
	for i, id := range written {
		outcomes[i] = dead(id, "dead")
	}
	require.EqualValues(t, n, f.record(t, "", outcomes...))
	return written
}

// requireDead checks that every event of ids is DEAD.
func (f *fixture[Tx]) requireDead(t *testing.T, ids []string) {
	t.Helper()
	for _, id := range ids {
		require.Equal(t, outbox.StatusDead, f.get(t, id).Status, id)
	}
}

func testEmptyIDListMatchesNoDeadEvent[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	written := f.writeDead(t, 3)

	n, err := f.Store.CountDead(ctx, outbox.DeadFilter{IDs: []string{}})
	require.NoError(t, err)
	require.Zero(t, n, "no event is among no ids")
	n, err = f.Store.CountDead(ctx, outbox.DeadFilter{IDs: nil})
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "nil ids restrict nothing")

	page, err := f.Store.QueryDead(ctx, outbox.DeadQuery{DeadFilter: outbox.DeadFilter{IDs: []string{}}})
	require.NoError(t, err)
	require.Empty(t, page, "no event is among no ids")
	page, err = f.Store.QueryDead(ctx, outbox.DeadQuery{DeadFilter: outbox.DeadFilter{IDs: nil}})
	require.NoError(t, err)
	require.Equal(t, written, IDs(page), "nil ids restrict nothing")

	// The ids an operator's query found, when it found none.
	n, err = f.Store.ReplayDead(ctx, outbox.DeadFilter{IDs: []string{}})
	require.NoError(t, err)
	require.Zero(t, n)
	f.requireDead(t, written)
}

// Every DEAD event, replayed on purpose: a filter of DiedBefore alone.
func testReplayEveryDeadEvent[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	written := f.writeDead(t, 3)
	n, err := f.Store.ReplayDead(ctx, outbox.DeadFilter{DiedBefore: f.Clock.Now()})
	require.NoError(t, err)
	require.Zero(t, n, "none died before now")
	f.requireDead(t, written)

	f.Clock.Advance(time.Second)
	n, err = f.Store.ReplayDead(ctx, outbox.DeadFilter{DiedBefore: f.Clock.Now()})
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	n, err = f.Store.CountDead(ctx, outbox.DeadFilter{})
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, written, f.claim(t, request{Owner: "me"}), "replayed events are due again")
}

func testPurgeDeletesOnlyOldTerminalRows[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	written := f.write(t, JSONEvents(25, "")...)
	require.EqualValues(t, 10, f.markDone(t, written[:10]...))
	var failed []outboxdriver.Outcome
	for _, id := range written[10:15] {
		failed = append(failed, dead(id, "dead"))
	}
	for _, id := range written[15:20] {
		failed = append(failed, retry(id, Start.Add(time.Hour), "retry"))
	}
	require.EqualValues(t, 10, f.record(t, "", failed...))
	f.Clock.Advance(48 * time.Hour)
	// Recently finished rows are kept.
	require.EqualValues(t, 1, f.markDone(t, written[20]))
	require.EqualValues(t, 1, f.record(t, "", dead(written[21], "")))

	n, err := f.driver.PurgeBatch(ctx, outboxdriver.PurgeParams{Statuses: []int16{int16(outbox.StatusDone)},
		Before: f.Clock.Now().Add(-24 * time.Hour), Limit: 4})
	require.NoError(t, err)
	require.EqualValues(t, 4, n, "one batch, of its limit")
	n, err = f.Store.Purge(ctx, outbox.PurgeRequest{OlderThan: 24 * time.Hour, BatchSize: 4, Statuses: []outbox.Status{outbox.StatusDone}})
	require.NoError(t, err)
	require.EqualValues(t, 6, n, "the other old DONE rows only, in batches of 4")
	n, err = f.Store.Purge(ctx, outbox.PurgeRequest{OlderThan: 24 * time.Hour, BatchSize: 4})
	require.NoError(t, err)
	require.EqualValues(t, 5, n, "then the old DEAD rows")
	require.Equal(t, 10, f.Count(t))
	for _, id := range written[15:] {
		f.get(t, id)
	}
	n, err = f.Store.Purge(ctx, outbox.PurgeRequest{OlderThan: 24 * time.Hour, BatchSize: 5})
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to purge")
}

// A claim returns a row whose headers do not decode with the others, and
// its headers as stored: the relay, which decodes them, marks it DEAD.
func testMalformedHeadersDoNotBreakTheBatch[Tx any](t *testing.T, f *fixture[Tx]) {
	written := f.write(t, JSONEvent(1), JSONEvent(2), JSONEvent(3))
	f.CorruptHeaders(t, written[1])

	claimed := f.claimRows(t, request{Owner: "me"})
	require.Equal(t, written, IDs(claimed))
	for i, r := range claimed {
		require.NoError(t, r.Malformed, "the driver reads the row")
		_, err := codec.DecodeHeaders(r.Headers)
		if i == 1 {
			require.Error(t, err, "headers %q", r.Headers)
			require.Equal(t, "me", r.LockedBy, "a malformed event is claimed like any other")
		} else {
			require.NoError(t, err)
		}
	}

	e, err := f.Store.Get(t.Context(), written[1])
	require.NoError(t, err, "Get reports a malformed row in the event, not as an error")
	require.Error(t, e.Malformed)
}

// testBatchReadsEqualSingleReads reads rows that differ in every optional
// column in one batch, one after another: a driver that decodes a batch
// with state carried from row to row must not let a row keep its
// predecessor's values.
func testBatchReadsEqualSingleReads[Tx any](t *testing.T, f *fixture[Tx]) {
	full := JSONEvent(1)
	full.AggregateType, full.AggregateID, full.TenantID = "Order", "order-1", "tenant-1"
	full.Headers = map[string]string{"traceparent": "00-abc-def-01"}
	other := outbox.NewBytes("Blob", []byte{0, 1, 2})
	other.Topic = string(full.Type) // the claim's topic, which full has by default
	other.AggregateType, other.AggregateID, other.TenantID = "Invoice", "invoice-2", "tenant-2"
	other.Headers = map[string]string{"k": "v"}
	bare := outbox.NewBytes("Bare", []byte{9})
	bare.Topic = other.Topic
	written := f.write(t, full, bare, other, JSONEvent(4))
	require.Len(t, f.claim(t, request{Owner: "me", Lease: time.Minute}), 4)
	require.EqualValues(t, 2, f.record(t, "me",
		retry(written[0], f.Clock.Now(), "first failure"),
		retry(written[2], f.Clock.Now(), "")))
	f.Clock.Advance(2 * time.Minute) // the other two come due again, still marked as claimed by me

	claimed := f.claimRows(t, request{Owner: "you"})
	require.ElementsMatch(t, written, IDs(claimed))
	for _, r := range claimed {
		require.Equal(t, f.getRow(t, r.ID), r)
	}
	require.Equal(t, "first failure", f.getRow(t, written[0]).LastError)
	require.Empty(t, f.getRow(t, written[2]).LastError)
}

func testGetUnknownEvent[Tx any](t *testing.T, f *fixture[Tx]) {
	_, found, err := f.driver.Get(t.Context(), "nope")
	require.NoError(t, err)
	require.False(t, found)
	_, err = f.Store.Get(t.Context(), "nope")
	require.ErrorIs(t, err, outbox.ErrNotFound)
}

func testBacklog[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	n, oldest, err := f.Store.Backlog(ctx, "OrderCreated")
	require.NoError(t, err)
	require.Zero(t, n)
	require.True(t, oldest.IsZero())

	scheduled := JSONEvent(0)
	scheduled.DeliverAfter = Start.Add(time.Hour)
	written := f.write(t, scheduled, JSONEvent(1))
	f.Clock.Advance(time.Minute)
	f.write(t, JSONEvent(2), JSONEvent(3))
	require.EqualValues(t, 1, f.markDone(t, written[1]))
	require.Len(t, f.claim(t, request{Owner: "me", Limit: 1}), 1)
	n, oldest, err = f.Store.Backlog(ctx, "OrderCreated")
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "DONE rows are not backlog; scheduled and claimed ones are")
	require.Equal(t, Start.Add(time.Minute), oldest.UTC(), "the earliest due, not the earliest written")
	n, _, err = f.Store.Backlog(ctx, "other")
	require.NoError(t, err)
	require.Zero(t, n, "per topic")
}

// markProcessed records id for consumer in a transaction of its own and
// reports whether it was new.
func (f *fixture[Tx]) markProcessed(t *testing.T, consumer, id string) bool {
	t.Helper()
	var first bool
	require.NoError(t, f.Store.InTx(t.Context(), func(ctx context.Context, tx Tx) (err error) {
		first, err = f.Store.MarkProcessed(ctx, tx, consumer, id)
		return err
	}))
	return first
}

// An event is new to a consumer once: committed, its record makes every
// later delivery a duplicate, for that consumer only; rolled back, it
// leaves no record.
func testInboxRecordsOncePerConsumer[Tx any](t *testing.T, f *fixture[Tx]) {
	require.True(t, f.markProcessed(t, "billing", "event-1"))
	require.False(t, f.markProcessed(t, "billing", "event-1"), "recorded already")
	require.True(t, f.markProcessed(t, "shipping", "event-1"), "another consumer")

	failed := errors.New("the handler failed")
	err := f.Store.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
		first, err := f.Store.MarkProcessed(ctx, tx, "billing", "event-2")
		require.NoError(t, err)
		require.True(t, first)
		return failed
	})
	require.ErrorIs(t, err, failed)
	require.True(t, f.markProcessed(t, "billing", "event-2"), "the rolled-back record is gone")
}

// Two deliveries of one event at once: the second waits for the first's
// transaction, and finds the event processed if it commits, new if it
// rolls back.
func testInboxWaitsForAnOpenTransaction[Tx any](t *testing.T, f *fixture[Tx]) {
	inbox := f.Store
	for _, commit := range []bool{true, false} {
		id := map[bool]string{true: "committed", false: "rolled-back"}[commit]
		holding, release := make(chan struct{}), make(chan struct{})
		firstDone := make(chan error, 1)
		go func() {
			firstDone <- inbox.InTx(context.Background(), func(ctx context.Context, tx Tx) error {
				if _, err := inbox.MarkProcessed(ctx, tx, "billing", id); err != nil {
					close(holding)
					return err
				}
				close(holding)
				<-release
				if !commit {
					return context.Canceled
				}
				return nil
			})
		}()
		<-holding
		var first bool
		second := make(chan error, 1)
		go func() {
			second <- inbox.InTx(context.Background(), func(ctx context.Context, tx Tx) (err error) {
				first, err = inbox.MarkProcessed(ctx, tx, "billing", id)
				return err
			})
		}()
		select {
		case err := <-second:
			t.Fatalf("the second delivery did not wait for the first's transaction (%v)", err)
		case <-time.After(200 * time.Millisecond):
		}
		close(release)
		err := <-firstDone
		if commit {
			require.NoError(t, err)
		} else {
			require.ErrorIs(t, err, context.Canceled)
		}
		require.NoError(t, <-second)
		require.Equal(t, !commit, first, "new to the second delivery only if the first rolled back")
	}
}

// The longest consumer and event id the engine takes, in characters of
// two bytes for the consumer, are stored.
func testInboxTakesNamesAtTheLimits[Tx any](t *testing.T, f *fixture[Tx]) {
	consumer, id := strings.Repeat("é", codec.MaxConsumerLen), strings.Repeat("e", codec.MaxProcessedIDLen)
	require.True(t, f.markProcessed(t, consumer, id), "at the limits, in characters")
	require.False(t, f.markProcessed(t, consumer, id), "and recorded whole")
}

// Records older than the retention go, and their events are new again;
// younger ones stay.
func testInboxPurge[Tx any](t *testing.T, f *fixture[Tx]) {
	for _, id := range []string{"old-1", "old-2", "old-3"} {
		require.True(t, f.markProcessed(t, "billing", id))
	}
	f.Clock.Advance(48 * time.Hour)
	require.True(t, f.markProcessed(t, "billing", "young"))

	n, err := f.driver.PurgeProcessedBatch(t.Context(), outboxdriver.PurgeParams{Before: f.Clock.Now().Add(-24 * time.Hour), Limit: 2})
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "one batch, of its limit")
	n, err = f.Store.PurgeProcessed(t.Context(), 24*time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	for _, id := range []string{"old-1", "old-2", "old-3"} {
		require.True(t, f.markProcessed(t, "billing", id), "purged: new again")
	}
	require.False(t, f.markProcessed(t, "billing", "young"), "kept")
}
