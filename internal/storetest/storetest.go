// Package storetest is the conformance suite of the outbox stores: every
// behaviour of [outbox.TxStore] that does not depend on the dialect, run
// against a real database. Each dialect's tests call [Run] with a
// [Harness] on a fresh database per test. Tests only.
package storetest

import (
	"bytes"
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
	"github.com/wmoutbox/wmoutbox/outbox"
)

// Start is the time the harness clock must start at.
var Start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Harness is one store on an empty, migrated database with the default
// table, and what the suite needs to look behind it.
type Harness[Tx any] struct {
	// Store is the store under test; its clock is Clock.
	Store outbox.TxStore[Tx]
	// DeleteDone is a store of the same dialect on the same table and
	// clock, configured to delete delivered events.
	DeleteDone outbox.Store
	// Clock is the store's clock, set to [Start].
	Clock *clocktest.Clock
	// Tx begins, commits and rolls back a transaction the test owns, on
	// the store's database.
	Tx outbox.TxFuncs[Tx]
	// Exec runs a statement without arguments in tx.
	Exec func(ctx context.Context, tx Tx, sql string) error
	// Count returns the number of rows in the outbox table.
	Count func(t *testing.T) int
	// CorruptHeaders stores headers that are valid JSON but not an object
	// of strings, {"a": 1}, in the row of event id.
	CorruptHeaders func(t *testing.T, id string)
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
		{"WriteWithoutTransactionFailsFast", testWriteWithoutTransactionFailsFast[Tx]},
		{"AfterCommitHooksRunOnlyOnCommitInOrder", testAfterCommitHooksRunOnlyOnCommitInOrder[Tx]},
		{"HotPathHookReceivesCommittedEvents", testHotPathHookReceivesCommittedEvents[Tx]},
		{"HotPathTakesOnlyWhatSavepointsKept", testHotPathTakesOnlyWhatSavepointsKept[Tx]},
		{"InsertRoundTripsEveryField", testInsertRoundTripsEveryField[Tx]},
		{"InsertBatches", testInsertBatches[Tx]},
		{"PayloadSizeBoundary", testPayloadSizeBoundary[Tx]},
		{"DuplicateEventID", testDuplicateEventID[Tx]},
		{"StatusTransitions", testStatusTransitions[Tx]},
		{"UpdateStatusDoneOrLastUpdatePerEventWins", testUpdateStatusDoneOrLastUpdatePerEventWins[Tx]},
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
		{"ClaimByTopic", testClaimByTopic[Tx]},
		{"ClaimRejectsBadRequests", testClaimRejectsBadRequests[Tx]},
		{"ClaimReturnsDueOrderNotIDOrder", testClaimReturnsDueOrderNotIDOrder[Tx]},
		{"ClaimCursorCoversTheBacklogOnce", testClaimCursorCoversTheBacklogOnce[Tx]},
		{"OrderedClaimTakesOneEventPerAggregateInWriteOrder", testOrderedClaimTakesOneEventPerAggregateInWriteOrder[Tx]},
		{"OrderedClaimByTopics", testOrderedClaimByTopics[Tx]},
		{"OrderedClaimOfNamedAggregates", testOrderedClaimOfNamedAggregates[Tx]},
		{"DeadEventsQueryCountReplay", testDeadEventsQueryCountReplay[Tx]},
		{"EmptyIDListMatchesNoDeadEvent", testEmptyIDListMatchesNoDeadEvent[Tx]},
		{"ReplayDeadRefusesAFilterThatRestrictsNothing", testReplayDeadRefusesAFilterThatRestrictsNothing[Tx]},
		{"PurgeDeletesOnlyOldTerminalRows", testPurgeDeletesOnlyOldTerminalRows[Tx]},
		{"MalformedHeadersDoNotBreakTheBatch", testMalformedHeadersDoNotBreakTheBatch[Tx]},
		{"BatchReadsEqualSingleReads", testBatchReadsEqualSingleReads[Tx]},
		{"GetUnknownEvent", testGetUnknownEvent[Tx]},
		{"Backlog", testBacklog[Tx]},
		{"InboxRecordsOncePerConsumer", testInboxRecordsOncePerConsumer[Tx]},
		{"InboxWaitsForAnOpenTransaction", testInboxWaitsForAnOpenTransaction[Tx]},
		{"InboxRefusesBadInput", testInboxRefusesBadInput[Tx]},
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
	writer *outbox.Writer[Tx]
}

func newFixture[Tx any](t *testing.T, newHarness func(t *testing.T) Harness[Tx]) *fixture[Tx] {
	t.Helper()
	h := newHarness(t)
	require.Equal(t, Start, h.Clock.Now(), "the harness clock starts at storetest.Start")
	writer, err := outbox.NewWriter(h.Store, outbox.WriterConfig{Clock: h.Clock})
	require.NoError(t, err)
	return &fixture[Tx]{Harness: h, writer: writer}
}

// write commits events in one transaction and returns their ids.
func (f *fixture[Tx]) write(t *testing.T, events ...outbox.Envelope) []string {
	t.Helper()
	var ids []string
	err := f.Store.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
		var err error
		ids, err = f.writer.Write(ctx, tx, events...)
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

func (f *fixture[Tx]) claim(t *testing.T, req outbox.ClaimRequest) []string {
	t.Helper()
	events, err := f.Store.Claim(t.Context(), req)
	require.NoError(t, err)
	return IDs(events)
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

// IDs returns the ids of events, in order.
func IDs(events []outbox.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
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

func testWriteWithoutTransactionFailsFast[Tx any](t *testing.T, f *fixture[Tx]) {
	var none Tx
	_, err := f.writer.Write(t.Context(), none, JSONEvent(1))
	require.ErrorIs(t, err, outbox.ErrNoTransaction)
	_, err = f.Store.Insert(t.Context(), none, nil, []outbox.Envelope{JSONEvent(1)}, outbox.Lease{})
	require.ErrorIs(t, err, outbox.ErrNoTransaction)
	_, err = f.Store.Kept(t.Context(), none, 1, []string{"any"})
	require.ErrorIs(t, err, outbox.ErrNoTransaction)
}

func testAfterCommitHooksRunOnlyOnCommitInOrder[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	var (
		mu  sync.Mutex
		got []string
	)
	record := func(name string) func(context.Context) error {
		return func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, name)
			return nil
		}
	}
	err := f.Store.InTx(ctx, func(ctx context.Context, tx Tx) error {
		require.NoError(t, outbox.AfterCommit(ctx, record("first")))
		require.NoError(t, outbox.AfterCommit(ctx, func(context.Context) error { panic("hook panics") }))
		require.NoError(t, outbox.AfterCommit(ctx, func(context.Context) error { return errors.New("hook fails") }))
		require.NoError(t, outbox.AfterCommit(ctx, record("second")))
		_, err := f.writer.Write(ctx, tx, JSONEvent(1))
		return err
	})
	require.NoError(t, err, "failing hooks never fail the commit")
	require.Equal(t, []string{"first", "second"}, got)
	require.Equal(t, 1, f.Count(t))

	got = nil
	err = f.Store.InTx(ctx, func(ctx context.Context, tx Tx) error {
		require.NoError(t, outbox.AfterCommit(ctx, record("rolled back")))
		return errors.New("rollback")
	})
	require.Error(t, err)
	require.Empty(t, got)
}

func testHotPathHookReceivesCommittedEvents[Tx any](t *testing.T, f *fixture[Tx]) {
	var got []outbox.Envelope
	writer, err := outbox.NewWriter(f.Store, outbox.WriterConfig{
		Clock:        f.Clock,
		ClaimOwner:   "relay-a",
		ClaimTimeout: time.Minute,
		AfterCommit: func(_ context.Context, events []outbox.Envelope, _ time.Duration) error {
			got = append(got, events...)
			return nil
		},
	})
	require.NoError(t, err)
	delayed := JSONEvent(2)
	delayed.DeliverAfter = Start.Add(time.Hour)
	var written []string
	require.NoError(t, f.Store.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
		written, err = writer.Write(ctx, tx, JSONEvent(1), delayed)
		return err
	}))
	require.Len(t, got, 1)
	require.Equal(t, written[0], got[0].ID)

	hot, cold := f.get(t, written[0]), f.get(t, written[1])
	require.Equal(t, "relay-a", hot.LockedBy, "hot-path rows are written claimed by the writing relay")
	require.Equal(t, Start, hot.LockedAt.UTC())
	require.Equal(t, Start.Add(time.Minute), hot.LockedUntil.UTC(), "due again for others when the lease ends")
	require.Equal(t, Start, hot.AvailableAt.UTC(), "due now, under the writer's lease")
	require.Empty(t, cold.LockedBy, "delayed rows are never pre-claimed")
	require.True(t, cold.LockedAt.IsZero())
	require.True(t, cold.LockedUntil.IsZero())
	require.Equal(t, delayed.DeliverAfter, cold.AvailableAt.UTC())

	req := outbox.ClaimRequest{Owner: "relay-b", LockTimeout: time.Minute}
	require.Empty(t, f.claim(t, req), "another relay leaves the hot row alone while the claim is fresh")
	f.Clock.Advance(time.Minute)
	require.Equal(t, written[:1], f.claim(t, req), "the claim of a relay that died expires")
}

// Rows written while a savepoint is open are the savepoint's, whatever
// transaction they were written through: the store marks such writes,
// and the hot path receives them only if the savepoint, and any it was
// in, was released.
func testHotPathTakesOnlyWhatSavepointsKept[Tx any](t *testing.T, f *fixture[Tx]) {
	var got []string
	writer, err := outbox.NewWriter(f.Store, outbox.WriterConfig{
		Clock: f.Clock,
		AfterCommit: func(_ context.Context, events []outbox.Envelope, _ time.Duration) error {
			for _, e := range events {
				got = append(got, string(e.Payload()))
			}
			return nil
		},
	})
	require.NoError(t, err)
	event := func(name string) outbox.Envelope { return outbox.NewBytes("Named", []byte(name)) }
	exec := func(ctx context.Context, tx Tx, sqls ...string) {
		for _, sql := range sqls {
			require.NoError(t, f.Exec(ctx, tx, sql))
		}
	}
	write := func(ctx context.Context, tx Tx, names ...string) {
		events := make([]outbox.Envelope, len(names))
		for i, name := range names {
			events[i] = event(name)
		}
		_, err := writer.Write(ctx, tx, events...)
		require.NoError(t, err)
	}
	var (
		mark, coldMark     uint64
		keptOpen, keptGone []string
	)
	require.NoError(t, f.Store.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
		exec(ctx, tx, "SAVEPOINT a")
		write(ctx, tx, "rolled back")
		hot, err := outbox.Prepare([]outbox.Envelope{event("inserted in a savepoint")}, Start)
		require.NoError(t, err)
		mark, err = f.Store.Insert(ctx, tx, hot, nil, outbox.Lease{})
		require.NoError(t, err)
		keptOpen, err = f.Store.Kept(ctx, tx, mark, []string{hot[0].ID})
		require.NoError(t, err)
		exec(ctx, tx, "ROLLBACK TO SAVEPOINT a")
		keptGone, err = f.Store.Kept(ctx, tx, mark, []string{hot[0].ID})
		require.NoError(t, err)
		exec(ctx, tx, "RELEASE SAVEPOINT a")

		write(ctx, tx, "top level")
		exec(ctx, tx, "SAVEPOINT b")
		write(ctx, tx, "released one", "released two")
		exec(ctx, tx, "RELEASE SAVEPOINT b")
		exec(ctx, tx, "SAVEPOINT c", "SAVEPOINT d")
		write(ctx, tx, "released into a savepoint rolled back")
		exec(ctx, tx, "RELEASE SAVEPOINT d", "ROLLBACK TO SAVEPOINT c", "RELEASE SAVEPOINT c")
		cold, err := outbox.Prepare([]outbox.Envelope{event("cold")}, Start)
		require.NoError(t, err)
		coldMark, err = f.Store.Insert(ctx, tx, nil, cold, outbox.Lease{})
		return err
	}))
	require.NotZero(t, mark, "a write in a savepoint is marked")
	require.Len(t, keptOpen, 1, "kept while its savepoint is open")
	require.Empty(t, keptGone, "not kept once its savepoint rolled back")
	require.Zero(t, coldMark, "a write with no hot event needs no mark")
	require.Equal(t, []string{"top level", "released one", "released two"}, got)
	require.Equal(t, 4, f.Count(t))
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
	require.NoError(t, e.Malformed)

	r := f.get(t, got[1])
	require.False(t, r.IsJSON())
	require.Equal(t, []byte{0, 1, 2, 0xff, 0}, r.PayloadBytes)
	require.Equal(t, outbox.GlobalAggregate, r.AggregateType)
	require.Equal(t, "Blob", r.Topic, "topic defaults to the event type")
	require.Empty(t, r.AggregateID)
	require.Empty(t, r.TenantID)
	require.Nil(t, r.Headers)

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

func testPayloadSizeBoundary[Tx any](t *testing.T, f *fixture[Tx]) {
	exact := bytes.Repeat([]byte{'x'}, outbox.MaxPayloadSize)
	id := f.write(t, outbox.NewBytes("Big", exact))[0]
	require.Equal(t, exact, f.get(t, id).PayloadBytes)

	err := f.Store.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
		_, err := f.writer.Write(ctx, tx, JSONEvent(1), outbox.NewBytes("Big", append(exact, 'x')))
		return err
	})
	require.ErrorIs(t, err, outbox.ErrInvalidEnvelope)
	require.Equal(t, 1, f.Count(t), "nothing of the rejected batch written")
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
	hotWriter, err := outbox.NewWriter(f.Store, outbox.WriterConfig{
		Clock:       f.Clock,
		ClaimOwner:  "relay-a",
		AfterCommit: func(context.Context, []outbox.Envelope, time.Duration) error { return nil },
	})
	require.NoError(t, err)
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
	ctx := t.Context()
	written := f.write(t, JSONEvent(1), JSONEvent(2), JSONEvent(3), JSONEvent(4))
	done, retried, dead, deferred := written[0], written[1], written[2], written[3]
	require.Len(t, f.claim(t, outbox.ClaimRequest{Owner: "me"}), 4)

	f.Clock.Advance(time.Second)
	now := f.Clock.Now()
	long := strings.Repeat("é", 5000)
	n, err := f.Store.UpdateStatus(ctx, "me",
		outbox.Done(done),
		outbox.Retry(retried, now.Add(time.Minute), errors.New(long)),
		outbox.Dead(dead, errors.New("poison")),
		outbox.Defer(deferred, now.Add(time.Hour), nil),
	)
	require.NoError(t, err)
	require.EqualValues(t, 4, n)

	e := f.get(t, done)
	require.Equal(t, outbox.StatusDone, e.Status)
	require.Equal(t, now, e.DoneAt.UTC())
	require.Equal(t, now, e.UpdatedAt.UTC())
	require.Zero(t, e.Attempts)
	require.Empty(t, e.LockedBy)
	require.True(t, e.LockedAt.IsZero())

	e = f.get(t, retried)
	require.Equal(t, outbox.StatusRetry, e.Status)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, now.Add(time.Minute), e.AvailableAt.UTC())
	require.Equal(t, strings.Repeat("é", outbox.MaxErrorLen), e.LastError, "5000-char error stored cut to 4000")
	require.Empty(t, e.LockedBy)
	require.True(t, e.DoneAt.IsZero())

	e = f.get(t, dead)
	require.Equal(t, outbox.StatusDead, e.Status)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, "poison", e.LastError)
	require.Empty(t, e.LockedBy)

	e = f.get(t, deferred)
	require.Equal(t, outbox.StatusNew, e.Status, "a deferral keeps the status")
	require.Zero(t, e.Attempts, "a deferral spends no attempt")
	require.Equal(t, now.Add(time.Hour), e.AvailableAt.UTC())
	require.Empty(t, e.LastError, "a deferral without a reason writes no error")
	require.Empty(t, e.LockedBy)

	// Idempotence, and DONE is final.
	f.Clock.Advance(time.Second)
	n, err = f.Store.UpdateStatus(ctx, "me", outbox.Done(done), outbox.Retry(done, now, errors.New("late")), outbox.Dead(done, nil))
	require.NoError(t, err)
	require.Zero(t, n)
	e = f.get(t, done)
	require.Equal(t, outbox.StatusDone, e.Status)
	require.Equal(t, now, e.DoneAt.UTC(), "a DONE row is never rewritten")
	require.Equal(t, now, e.UpdatedAt.UTC())
	// Nor by an outcome alone in its batch, from no owner: the DONE row
	// holds no claim that would stop it.
	for _, late := range []outbox.StatusUpdate{
		outbox.Retry(done, now, errors.New("late")), outbox.Dead(done, errors.New("late")), outbox.Defer(done, now, nil),
	} {
		n, err = f.Store.UpdateStatus(ctx, "", late)
		require.NoError(t, err)
		require.Zero(t, n, "%v from no owner on a DONE row", late.Status)
		e = f.get(t, done)
		require.Equal(t, outbox.StatusDone, e.Status)
		require.Zero(t, e.Attempts)
		require.Equal(t, now, e.DoneAt.UTC())
		require.Empty(t, e.LastError)
	}

	// The relay's claim ended with its first outcome: the same RETRY sent
	// again (a statement retried after a timeout) spends no second attempt.
	n, err = f.Store.UpdateStatus(ctx, "me", outbox.Retry(retried, now.Add(2*time.Minute), errors.New("again")))
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, 1, f.get(t, retried).Attempts)
	// Without an owner, an outcome applies to any event under no lease.
	n, err = f.Store.UpdateStatus(ctx, "", outbox.Retry(retried, now.Add(2*time.Minute), errors.New("again")))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	e = f.get(t, retried)
	require.Equal(t, 2, e.Attempts)
	require.Equal(t, "again", e.LastError)

	// A DONE ignores an error and a next time (StatusUpdate's docs).
	n, err = f.Store.UpdateStatus(ctx, "me",
		outbox.StatusUpdate{ID: retried, Status: outbox.StatusDone, Error: "ignored", NextAt: now.Add(time.Hour)})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	e = f.get(t, retried)
	require.Equal(t, outbox.StatusDone, e.Status)
	require.Equal(t, 2, e.Attempts, "a success spends no attempt")
	require.Equal(t, "again", e.LastError, "the last failure stays readable after success")
	require.Equal(t, now.Add(2*time.Minute), e.AvailableAt.UTC(), "a success keeps the due time")

	_, err = f.Store.UpdateStatus(ctx, "me", outbox.StatusUpdate{ID: dead, Status: outbox.StatusRetry})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	n, err = f.Store.UpdateStatus(ctx, "me", outbox.Done("no-such-event"))
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = f.Store.UpdateStatus(ctx, "me")
	require.NoError(t, err)
	require.Zero(t, n)
	for _, owner := range []string{"bad\x00owner", "bad\xffowner", strings.Repeat("o", outbox.MaxOwnerLen+1)} {
		_, err = f.Store.UpdateStatus(ctx, owner, outbox.Done(retried))
		require.ErrorIs(t, err, outbox.ErrInvalidRequest, "owner %q", owner)
	}
}

// An outcome counts only from the relay that holds the event: a relay
// slower than its lease, whose event another relay claimed since, or whose
// event went DEAD, must not clear the other's lease, revive the event, or
// spend its attempts. DONE is the exception: the event was delivered.
func testStaleOutcomesChangeNothing[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	written := f.write(t, JSONEvent(1), JSONEvent(2), JSONEvent(3), JSONEvent(4))
	retried, dead, deferred, delivered := written[0], written[1], written[2], written[3]
	require.Len(t, f.claim(t, outbox.ClaimRequest{Owner: "slow", LockTimeout: time.Minute}), 4)
	f.Clock.Advance(2 * time.Minute)
	require.Len(t, f.claim(t, outbox.ClaimRequest{Owner: "b", LockTimeout: time.Minute}), 4)

	now := f.Clock.Now()
	late := []outbox.StatusUpdate{
		outbox.Retry(retried, now.Add(time.Hour), errors.New("late")),
		outbox.Dead(dead, errors.New("late")),
		outbox.Defer(deferred, now.Add(time.Hour), errors.New("late")),
	}
	for _, owner := range []string{"slow", ""} {
		n, err := f.Store.UpdateStatus(ctx, owner, late...)
		require.NoError(t, err)
		require.Zero(t, n, "outcomes from %q while b's lease runs", owner)
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
	n, err := f.Store.UpdateStatus(ctx, "b", outbox.Dead(dead, errors.New("poison")))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	for _, owner := range []string{"b", "slow", ""} {
		n, err = f.Store.UpdateStatus(ctx, owner, outbox.Retry(dead, now, errors.New("late")),
			outbox.Defer(dead, now, nil), outbox.Dead(dead, errors.New("late")))
		require.NoError(t, err)
		require.Zero(t, n, "outcomes from %q after DEAD", owner)
	}
	e := f.get(t, dead)
	require.Equal(t, outbox.StatusDead, e.Status)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, "poison", e.LastError)

	// A lease that ran out still lets its owner record, as long as no other
	// relay claimed the event since; without an owner, so does any lease
	// that ran out.
	f.Clock.Advance(2 * time.Minute)
	n, err = f.Store.UpdateStatus(ctx, "slow", late[0])
	require.NoError(t, err)
	require.Zero(t, n, "b claimed it after slow")
	n, err = f.Store.UpdateStatus(ctx, "b", late[0])
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "b's own lease, run out")
	n, err = f.Store.UpdateStatus(ctx, "", late[2])
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "no running lease")
	require.Equal(t, now.Add(time.Hour), f.get(t, deferred).AvailableAt.UTC())

	// A late success is recorded: the event was delivered.
	n, err = f.Store.UpdateStatus(ctx, "slow", outbox.Done(delivered), outbox.Done(dead))
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Equal(t, outbox.StatusDone, f.get(t, delivered).Status)
	require.Equal(t, outbox.StatusDone, f.get(t, dead).Status)
}

// An outcome that says which attempt it reports applies once: written
// again (its statement sent again after the reply was lost), it neither
// counts the attempt twice nor ends the claim its owner has made since.
// One that does not say is applied as before.
func testOutcomeWrittenTwiceCountsOnce[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	written := f.write(t, JSONEvent(1), JSONEvent(2), JSONEvent(3))
	retried, dead, unchecked := written[0], written[1], written[2]
	require.Len(t, f.claim(t, outbox.ClaimRequest{Owner: "me", LockTimeout: time.Minute}), 3)
	now := f.Clock.Now()
	failed := errors.New("failed")
	outcomes := []outbox.StatusUpdate{
		outbox.Decide(retried, 1, failed, outbox.Backoff{Base: time.Second, Max: time.Second, MaxAttempts: 5}, now),
		outbox.Decide(dead, 1, outbox.Permanent(failed), nil, now),
		outbox.Retry(unchecked, now, failed),
	}
	require.Equal(t, 1, outcomes[0].Attempt)
	n, err := f.Store.UpdateStatus(ctx, "me", outcomes...)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)

	f.Clock.Advance(2 * time.Second)
	require.ElementsMatch(t, []string{retried, unchecked},
		f.claim(t, outbox.ClaimRequest{Owner: "me", LockTimeout: time.Minute}), "due again, and claimed again by me")
	n, err = f.Store.UpdateStatus(ctx, "me", outcomes...)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "only the outcome that does not say its attempt is applied again")

	e := f.get(t, retried)
	require.Equal(t, outbox.StatusRetry, e.Status)
	require.Equal(t, 1, e.Attempts, "one failure, counted once")
	require.Equal(t, "me", e.LockedBy, "the newer claim holds")
	e = f.get(t, dead)
	require.Equal(t, outbox.StatusDead, e.Status)
	require.Equal(t, 1, e.Attempts)
	e = f.get(t, unchecked)
	require.Equal(t, 2, e.Attempts, "unchecked: applied to the newer claim too")
	require.Empty(t, e.LockedBy)

	// The next attempt's outcome is recorded.
	next := outbox.Decide(retried, 2, failed, outbox.Backoff{Base: time.Second, Max: time.Second, MaxAttempts: 5}, now)
	n, err = f.Store.UpdateStatus(ctx, "me", next)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, 2, f.get(t, retried).Attempts)

	_, err = f.Store.UpdateStatus(ctx, "me", outbox.StatusUpdate{ID: retried, Status: outbox.StatusDead, Attempt: -1})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
}

func testUpdateStatusDoneOrLastUpdatePerEventWins[Tx any](t *testing.T, f *fixture[Tx]) {
	id := f.write(t, JSONEvent(1))[0]
	n, err := f.Store.UpdateStatus(t.Context(), "",
		outbox.Retry(id, Start.Add(time.Minute), errors.New("first")), outbox.Dead(id, errors.New("second")))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	e := f.get(t, id)
	require.Equal(t, outbox.StatusDead, e.Status)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, "second", e.LastError)

	// A DONE is final in a batch as in the table: a nack of a second
	// delivery in the same batch does not make a delivered event pending.
	id = f.write(t, JSONEvent(2))[0]
	n, err = f.Store.UpdateStatus(t.Context(), "",
		outbox.Done(id), outbox.Retry(id, Start.Add(time.Minute), errors.New("second delivery failed")))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, outbox.StatusDone, f.get(t, id).Status)
}

// A store configured to delete delivered events deletes the rows of DONE
// outcomes, records every other outcome as usual, and leaves rows that
// were DONE already alone.
func testDeleteDoneDeletesOnlyDeliveredEvents[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	written := f.write(t, JSONEvent(1), JSONEvent(2), JSONEvent(3), JSONEvent(4), JSONEvent(5), JSONEvent(6))
	delivered, retried, dead, deferred, doneBefore, lateSuccess := written[0], written[1], written[2], written[3], written[4], written[5]
	require.Len(t, f.claim(t, outbox.ClaimRequest{Owner: "me"}), 6)
	n, err := f.Store.UpdateStatus(ctx, "me", outbox.Done(doneBefore))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	f.Clock.Advance(time.Second)
	now := f.Clock.Now()
	n, err = f.DeleteDone.UpdateStatus(ctx, "me",
		outbox.Done(delivered),
		outbox.Retry(retried, now.Add(time.Minute), errors.New("refused")),
		outbox.Dead(dead, errors.New("poison")),
		outbox.Defer(deferred, now.Add(time.Hour), nil),
		outbox.Done(doneBefore),
		outbox.Retry(lateSuccess, now, errors.New("first")), outbox.Done(lateSuccess),
	)
	require.NoError(t, err)
	require.EqualValues(t, 5, n, "one row deleted for each DONE outcome, one updated for each other; the DONE row untouched")
	require.Equal(t, 4, f.Count(t))
	for _, id := range []string{delivered, lateSuccess} {
		_, err = f.DeleteDone.Get(ctx, id)
		require.ErrorIs(t, err, outbox.ErrNotFound, "a delivered event is deleted")
	}

	e := f.get(t, retried)
	require.Equal(t, outbox.StatusRetry, e.Status)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, "refused", e.LastError)
	require.Equal(t, now.Add(time.Minute), e.AvailableAt.UTC())
	require.Empty(t, e.LockedBy)
	e = f.get(t, dead)
	require.Equal(t, outbox.StatusDead, e.Status)
	require.Equal(t, "poison", e.LastError)
	e = f.get(t, deferred)
	require.Equal(t, outbox.StatusNew, e.Status)
	require.Equal(t, now.Add(time.Hour), e.AvailableAt.UTC())
	e = f.get(t, doneBefore)
	require.Equal(t, outbox.StatusDone, e.Status, "a row DONE already is left to Purge")
	require.Equal(t, Start, e.DoneAt.UTC())

	// Recording again is harmless, and only DONE outcomes delete.
	n, err = f.DeleteDone.UpdateStatus(ctx, "me", outbox.Done(delivered), outbox.Done(doneBefore))
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = f.DeleteDone.UpdateStatus(ctx, "", outbox.Retry(retried, now, errors.New("again")))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, 2, f.get(t, retried).Attempts)
	n, err = f.DeleteDone.UpdateStatus(ctx, "me", outbox.Done(retried), outbox.Done(dead))
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Equal(t, 2, f.Count(t), "the deferred event and the DONE row are left")
}

func testDelayedEventsInvisibleUntilDue[Tx any](t *testing.T, f *fixture[Tx]) {
	delayed := JSONEvent(1)
	delayed.DeliverAfter = Start.Add(10 * time.Second)
	id := f.write(t, delayed)[0]
	require.Equal(t, delayed.DeliverAfter, f.get(t, id).AvailableAt.UTC())

	req := outbox.ClaimRequest{Owner: "me"}
	require.Empty(t, f.claim(t, req))
	f.Clock.Advance(9 * time.Second)
	require.Empty(t, f.claim(t, req))
	f.Clock.Advance(time.Second)
	require.Equal(t, []string{id}, f.claim(t, req))
}

func testRetryAndDeferredDueAgainAtNextTime[Tx any](t *testing.T, f *fixture[Tx]) {
	written := f.write(t, JSONEvent(1), JSONEvent(2))
	_, err := f.Store.UpdateStatus(t.Context(), "",
		outbox.Retry(written[0], Start.Add(time.Second), errors.New("down")),
		outbox.Defer(written[1], Start.Add(2*time.Second), nil))
	require.NoError(t, err)
	req := outbox.ClaimRequest{Owner: "me"}
	require.Empty(t, f.claim(t, req))
	f.Clock.Advance(time.Second)
	require.Equal(t, written[:1], f.claim(t, req))
	f.Clock.Advance(time.Second)
	require.Equal(t, written[1:], f.claim(t, req))
	require.Zero(t, f.get(t, written[1]).Attempts)
}

func testClaimLocksAndExpires[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	written := f.write(t, JSONEvent(1), JSONEvent(2), JSONEvent(3))

	a, err := f.Store.Claim(ctx, outbox.ClaimRequest{Owner: "a", Limit: 2, LockTimeout: 30 * time.Second})
	require.NoError(t, err)
	require.Equal(t, written[:2], IDs(a), "due order, limit honoured")
	for _, e := range a {
		require.Equal(t, "a", e.LockedBy)
		require.Equal(t, Start, e.LockedAt.UTC())
		require.Equal(t, Start.Add(30*time.Second), e.LockedUntil.UTC(), "the lease end")
		require.Equal(t, Start, e.AvailableAt.UTC(), "a claim leaves the due time alone")
		require.Equal(t, e, f.get(t, e.ID), "the claim returns the rows as stored")
	}
	b := f.claim(t, outbox.ClaimRequest{Owner: "b", LockTimeout: 30 * time.Second})
	require.Equal(t, written[2:], b, "fresh claims are not taken")

	f.Clock.Advance(29 * time.Second)
	require.Empty(t, f.claim(t, outbox.ClaimRequest{Owner: "c", LockTimeout: 30 * time.Second}),
		"claims younger than the lock timeout hold")

	f.Clock.Advance(time.Second)
	c := f.claim(t, outbox.ClaimRequest{Owner: "c", LockTimeout: 30 * time.Second})
	require.ElementsMatch(t, written, c, "expired claims are taken over")
	e := f.get(t, written[0])
	require.Equal(t, "c", e.LockedBy)
	require.Equal(t, Start.Add(30*time.Second), e.LockedAt.UTC())
	require.Equal(t, Start.Add(time.Minute), e.LockedUntil.UTC())
	require.Equal(t, outbox.StatusNew, e.Status, "a claim changes no status")
	require.Zero(t, e.Attempts, "nor the attempts")
}

func testReleaseLetsOthersClaimAtOnce[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	written := f.write(t, JSONEvent(1), JSONEvent(2))
	require.Len(t, f.claim(t, outbox.ClaimRequest{Owner: "a"}), 2)

	n, err := f.Store.Release(ctx, "not-the-owner", written)
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = f.Store.Release(ctx, "a", nil)
	require.NoError(t, err)
	require.Zero(t, n)
	f.Clock.Advance(time.Second)
	n, err = f.Store.Release(ctx, "a", written[:1])
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	e := f.get(t, written[0])
	require.Empty(t, e.LockedBy)
	require.True(t, e.LockedAt.IsZero())
	require.True(t, e.LockedUntil.IsZero())
	require.Equal(t, Start, e.AvailableAt.UTC(), "due at once, at the time it was due before")
	require.Equal(t, written[:1], f.claim(t, outbox.ClaimRequest{Owner: "b"}))

	_, err = f.Store.UpdateStatus(ctx, "a", outbox.Done(written[1]))
	require.NoError(t, err)
	n, err = f.Store.Release(ctx, "a", written[1:])
	require.NoError(t, err)
	require.Zero(t, n, "finished events have no claim to release")
}

// A relay started again under its owner hands back the claims its earlier
// run held on its topic: only those, made before it started, and pending.
func testReleaseOwnedHandsBackAnEarlierRunsClaims[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	orders := f.write(t, JSONEvents(4, "orders")...)
	other := f.write(t, JSONEvents(1, "billing")...)
	require.Len(t, f.claim(t, outbox.ClaimRequest{Owner: "relay-1", Limit: 2, Topics: []string{"orders"}}), 2)
	require.Len(t, f.claim(t, outbox.ClaimRequest{Owner: "relay-2", Limit: 1, Topics: []string{"orders"}}), 1)
	require.Len(t, f.claim(t, outbox.ClaimRequest{Owner: "relay-1", Topics: []string{"billing"}}), 1)
	_, err := f.Store.UpdateStatus(ctx, "relay-1", outbox.Done(orders[1]))
	require.NoError(t, err)
	restarted := f.Clock.Advance(time.Second)
	f.Clock.Advance(time.Second)
	require.Len(t, f.claim(t, outbox.ClaimRequest{Owner: "relay-1", Topics: []string{"orders"}}), 1, "the restarted run's own claim")

	for _, bad := range [][2]string{{"", "orders"}, {"relay-1", ""}} {
		_, err := f.Store.ReleaseOwned(ctx, bad[0], bad[1], restarted)
		require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	}
	n, err := f.Store.ReleaseOwned(ctx, "relay-1", "orders", restarted)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the earlier run's pending claim on orders, not its DONE event, relay-2's, billing's or the new run's")
	e := f.get(t, orders[0])
	require.Empty(t, e.LockedBy)
	require.Equal(t, Start, e.AvailableAt.UTC(), "due at once, at the time it was due before")
	require.Equal(t, "relay-2", f.get(t, orders[2]).LockedBy)
	require.Equal(t, "relay-1", f.get(t, orders[3]).LockedBy)
	require.Equal(t, "relay-1", f.get(t, other[0]).LockedBy)
	require.Equal(t, orders[:1], f.claim(t, outbox.ClaimRequest{Owner: "relay-3", Topics: []string{"orders"}}))
}

// An event whose claim ends, released or run out, is due again where it
// was in due order, ahead of events that became due while it was claimed.
func testClaimEndKeepsDueOrder[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	first := f.write(t, JSONEvent(1), JSONEvent(2))
	require.Equal(t, first, f.claim(t, outbox.ClaimRequest{Owner: "a", LockTimeout: time.Minute}))
	f.Clock.Advance(time.Second)
	later := f.write(t, JSONEvent(3))
	f.Clock.Advance(time.Second)

	n, err := f.Store.Release(ctx, "a", first[1:])
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, first[1:], f.claim(t, outbox.ClaimRequest{Owner: "b", Limit: 1}),
		"the released event comes before the one written after it")
	_, err = f.Store.UpdateStatus(ctx, "b", outbox.Done(first[1]))
	require.NoError(t, err)

	f.Clock.Advance(time.Minute)
	require.Equal(t, []string{first[0], later[0]}, f.claim(t, outbox.ClaimRequest{Owner: "c"}),
		"so does the event whose lease ran out")
}

func testClaimSkipsRecentEvents[Tx any](t *testing.T, f *fixture[Tx]) {
	old := f.write(t, JSONEvent(1))
	f.Clock.Advance(time.Second)
	f.write(t, JSONEvent(2))

	polled, err := f.Store.PollPending(t.Context(), outbox.PollRequest{SkipRecent: 500 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, old, IDs(polled), "poll honours skip-recent")
	require.Empty(t, f.get(t, old[0]).LockedBy, "poll does not claim")

	require.Equal(t, old, f.claim(t, outbox.ClaimRequest{Owner: "me", SkipRecent: time.Second}))
	require.Equal(t, "me", f.get(t, old[0]).LockedBy)

	polled, err = f.Store.PollPending(t.Context(), outbox.PollRequest{})
	require.NoError(t, err)
	require.Len(t, polled, 1, "a claimed event is not due while its lease runs")
	require.NotEqual(t, old[0], polled[0].ID)
}

func testOrderedClaimTakesOneEventPerAggregateInWriteOrder[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	mk := func(id, topic, aggregateType, aggregateID string) outbox.Envelope {
		e := JSONEvent(0)
		e.ID, e.Topic, e.AggregateType, e.AggregateID = id, topic, outbox.AggregateType(aggregateType), aggregateID
		return e
	}
	// One transaction each, in this order. The ids of order 1's events run
	// backwards: write order decides, not the id, which orders the claim.
	f.write(t, mk("o1-first", "orders", "Order", "1"))
	f.write(t, mk("b-order2", "orders", "Order", "2"))
	f.write(t, mk("a-no-aggregate", "orders", "Order", ""))
	f.write(t, mk("c-customer1", "orders", "Customer", "1"))
	f.write(t, mk("d-shipping", "shipping", "Order", "1"))
	f.write(t, mk("o1-second", "orders", "Order", "1"))
	f.write(t, mk("o1-a-third", "orders", "Order", "1"))

	lease := time.Minute
	req := outbox.ClaimRequest{Owner: "r", LockTimeout: lease, Topics: []string{"orders"}, Ordered: true}
	claim := func(msg string, want ...string) {
		t.Helper()
		require.ElementsMatch(t, want, f.claim(t, req), msg)
	}
	claim("the first event of each aggregate; one without an aggregate id is not ordered",
		"o1-first", "b-order2", "a-no-aggregate", "c-customer1")
	claim("an event in flight holds back the rest of its aggregate")

	update := func(u outbox.StatusUpdate) {
		t.Helper()
		n, err := f.Store.UpdateStatus(ctx, "r", u)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
	}
	for _, id := range []string{"b-order2", "a-no-aggregate", "c-customer1"} {
		update(outbox.Done(id))
	}
	retry := outbox.Retry("o1-first", Start.Add(time.Minute), errors.New("broker down"))
	retry.Attempt = 1
	update(retry)
	claim("so does one waiting for its retry")
	f.Clock.Advance(time.Minute)
	claim("the retry comes first", "o1-first")
	dead := outbox.Dead("o1-first", errors.New("poison"))
	dead.Attempt = 2
	update(dead)
	claim("a DEAD event holds back the rest of its aggregate")
	n, err := f.Store.ReplayDead(ctx, outbox.DeadFilter{IDs: []string{"o1-first"}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	claim("until it is replayed, and delivered first", "o1-first")
	update(outbox.Done("o1-first"))
	claim("then the next in write order", "o1-second")
	f.Clock.Advance(lease)
	claim("a lease run out gives the same event again", "o1-second")
	update(outbox.Done("o1-second"))
	claim("then the next", "o1-a-third")

	req.Topics, req.Ordered = []string{"shipping"}, false
	f.write(t, mk("e-shipping", "shipping", "Order", "1"))
	claim("an unordered claim takes every due event", "d-shipping", "e-shipping")
}

// An ordered claim that names aggregates takes the first event of each
// when it is due, and never an event that waits for an earlier one of its
// aggregate. Stores that do not narrow such claims may take the first
// events of other aggregates too.
func testOrderedClaimOfNamedAggregates[Tx any](t *testing.T, f *fixture[Tx]) {
	mk := func(id, aggregateType, aggregateID string) outbox.Envelope {
		e := JSONEvent(0)
		e.ID, e.Topic, e.AggregateType, e.AggregateID = id, "orders", outbox.AggregateType(aggregateType), aggregateID
		return e
	}
	for _, e := range []outbox.Envelope{mk("o1-first", "Order", "1"), mk("o2-first", "Order", "2"),
		mk("c1-first", "Customer", "1"), mk("o1-second", "Order", "1")} {
		f.write(t, e)
	}
	order1 := outbox.Aggregate{Topic: "orders", Type: "Order", ID: "1"}
	req := outbox.ClaimRequest{Owner: "r", Topics: []string{"orders"}, Ordered: true, Aggregates: []outbox.Aggregate{order1}}
	heads := []string{"o1-first", "o2-first", "c1-first"}
	claimed := f.claim(t, req)
	require.Contains(t, claimed, "o1-first")
	require.Subset(t, heads, claimed, "only first events")
	claimed = append(claimed, f.claim(t, req)...)
	require.NotContains(t, claimed, "o1-second", "the first event of its aggregate is in flight")
	n, err := f.Store.UpdateStatus(t.Context(), "r", outbox.Done("o1-first"))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Contains(t, f.claim(t, req), "o1-second", "the next once the first is DONE")

	for name, bad := range map[string]outbox.ClaimRequest{
		"unordered":       {Owner: "r", Aggregates: []outbox.Aggregate{order1}},
		"no aggregate id": {Owner: "r", Ordered: true, Aggregates: []outbox.Aggregate{{Topic: "orders", Type: "Order"}}},
		"another topic":   {Owner: "r", Ordered: true, Topics: []string{"shipping"}, Aggregates: []outbox.Aggregate{order1}},
		"more than limit": {Owner: "r", Ordered: true, Limit: 1, Aggregates: []outbox.Aggregate{order1, order1}},
	} {
		_, err := f.Store.Claim(t.Context(), bad)
		require.ErrorIs(t, err, outbox.ErrInvalidRequest, name)
	}
}

// Ordered claims of several topics, or of every topic, keep each topic's
// aggregates apart: the same aggregate in two topics is two sequences.
func testOrderedClaimByTopics[Tx any](t *testing.T, f *fixture[Tx]) {
	mk := func(id, topic string) outbox.Envelope {
		e := JSONEvent(0)
		e.ID, e.Topic, e.AggregateType, e.AggregateID = id, topic, "Order", "1"
		return e
	}
	for _, e := range []outbox.Envelope{mk("x1", "x"), mk("y1", "y"), mk("z1", "z"), mk("x2", "x"), mk("y2", "y"), mk("z2", "z")} {
		f.write(t, e)
	}
	req := outbox.ClaimRequest{Owner: "r", Ordered: true}
	req.Topics = []string{"x", "y"}
	require.ElementsMatch(t, []string{"x1", "y1"}, f.claim(t, req))
	req.Topics = nil
	require.ElementsMatch(t, []string{"z1"}, f.claim(t, req), "every topic: the first of z's aggregate")
	n, err := f.Store.UpdateStatus(t.Context(), "r", outbox.Done("x1"), outbox.Done("z1"))
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.ElementsMatch(t, []string{"x2", "z2"}, f.claim(t, req))
	req.Topics = []string{"y", "w"}
	require.Empty(t, f.claim(t, req), "y2 waits for y1")
}

func testClaimByTopic[Tx any](t *testing.T, f *fixture[Tx]) {
	mk := func(topic string) outbox.Envelope {
		e := JSONEvent(0)
		e.Topic = topic
		return e
	}
	written := f.write(t, mk("a"), mk("b"), mk("c"), mk("a"))

	polled, err := f.Store.PollPending(t.Context(), outbox.PollRequest{Topics: []string{"a", "b"}})
	require.NoError(t, err)
	require.Equal(t, []string{written[0], written[1], written[3]}, IDs(polled))
	polled, err = f.Store.PollPending(t.Context(), outbox.PollRequest{Topics: []string{"c"}})
	require.NoError(t, err)
	require.Equal(t, []string{written[2]}, IDs(polled))

	require.Equal(t, []string{written[0], written[3]}, f.claim(t, outbox.ClaimRequest{Owner: "x", Topics: []string{"a"}}))
	require.Equal(t, []string{written[1]}, f.claim(t, outbox.ClaimRequest{Owner: "x", Topics: []string{"b", "zzz"}}))
	require.Equal(t, []string{written[2]}, f.claim(t, outbox.ClaimRequest{Owner: "x"}))
}

func testClaimRejectsBadRequests[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	f.write(t, JSONEvent(1))
	_, err := f.Store.Claim(ctx, outbox.ClaimRequest{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	_, err = f.Store.Claim(ctx, outbox.ClaimRequest{Owner: "x", Limit: -1})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	_, err = f.Store.PollPending(ctx, outbox.PollRequest{SkipRecent: -time.Second})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	_, err = f.Store.QueryDead(ctx, outbox.DeadQuery{Limit: -1})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	require.Len(t, f.claim(t, outbox.ClaimRequest{Owner: "x"}), 1, "a rejected request claims nothing")
}

func testClaimReturnsDueOrderNotIDOrder[Tx any](t *testing.T, f *fixture[Tx]) {
	older := f.write(t, JSONEvent(1))[0]
	f.Clock.Advance(time.Second)
	newer := f.write(t, JSONEvent(2))[0]
	_, err := f.Store.UpdateStatus(t.Context(), "", outbox.Retry(older, f.Clock.Now().Add(time.Second), errors.New("down")))
	require.NoError(t, err)
	f.Clock.Advance(2 * time.Second)

	polled, err := f.Store.PollPending(t.Context(), outbox.PollRequest{})
	require.NoError(t, err)
	require.Equal(t, []string{newer, older}, IDs(polled), "poll too")
	require.Equal(t, []string{newer, older}, f.claim(t, outbox.ClaimRequest{Owner: "me"}),
		"the retried event is due after the newer one")
}

// A run of claims that share a cursor takes every event once, in due
// order; an event that became due behind the cursor is claimed once the
// cursor is reset (a store may or may not take it before).
func testClaimCursorCoversTheBacklogOnce[Tx any](t *testing.T, f *fixture[Tx]) {
	written := f.write(t, JSONEvent(1), JSONEvent(2), JSONEvent(3), JSONEvent(4), JSONEvent(5))
	var cursor outbox.ClaimCursor
	req := outbox.ClaimRequest{Owner: "me", Limit: 2, Cursor: &cursor}
	var claimed []string
	for range 3 {
		claimed = append(claimed, f.claim(t, req)...)
	}
	require.Equal(t, written, claimed)
	require.Empty(t, f.claim(t, req))

	// Released at the time it was first due: behind the cursor.
	n, err := f.Store.Release(t.Context(), "me", written[:1])
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	cursor.Reset()
	require.True(t, cursor.IsZero())
	require.Equal(t, written[:1], f.claim(t, req))
}

func testDeadEventsQueryCountReplay[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	mk := func(typ outbox.EventType, topic string) outbox.Envelope {
		return outbox.Envelope{Type: typ, Topic: topic, PayloadJSON: []byte(`{}`)}
	}
	written := f.write(t, mk("A", "t1"), mk("A", "t2"), mk("B", "t1"), mk("A", "t1"), mk("A", "t1"))
	_, err := f.Store.UpdateStatus(ctx, "", outbox.Dead(written[0], errors.New("e0")), outbox.Dead(written[1], errors.New("e1")))
	require.NoError(t, err)
	f.Clock.Advance(time.Hour)
	_, err = f.Store.UpdateStatus(ctx, "", outbox.Dead(written[2], errors.New("e2")), outbox.Dead(written[3], errors.New("e3")))
	require.NoError(t, err)
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
	page, err = f.Store.QueryDead(ctx, outbox.DeadQuery{DeadFilter: outbox.DeadFilter{IDs: written[1:2], Topic: "t2"}})
	require.NoError(t, err)
	require.Equal(t, written[1:2], IDs(page))

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
	require.EqualValues(t, 2, count(outbox.DeadFilter{}))

	require.ElementsMatch(t, []string{written[0], written[3], written[4]}, f.claim(t, outbox.ClaimRequest{Owner: "me"}),
		"replayed events are due again")
}

// writeDead writes n events and kills them all.
func (f *fixture[Tx]) writeDead(t *testing.T, n int) []string {
	t.Helper()
	written := f.write(t, JSONEvents(n, "")...)
	updates := make([]outbox.StatusUpdate, len(written))
	for i, id := range written {
		updates[i] = outbox.Dead(id, errors.New("dead"))
	}
	_, err := f.Store.UpdateStatus(t.Context(), "", updates...)
	require.NoError(t, err)
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

func testReplayDeadRefusesAFilterThatRestrictsNothing[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	written := f.writeDead(t, 3)

	n, err := f.Store.ReplayDead(ctx, outbox.DeadFilter{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	require.ErrorContains(t, err, "DiedBefore: time.Now()", "the error says how to replay everything")
	require.Zero(t, n)
	f.requireDead(t, written)

	// Everything, on purpose.
	f.Clock.Advance(time.Second)
	n, err = f.Store.ReplayDead(ctx, outbox.DeadFilter{DiedBefore: f.Clock.Now()})
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	n, err = f.Store.CountDead(ctx, outbox.DeadFilter{})
	require.NoError(t, err)
	require.Zero(t, n)
	require.ElementsMatch(t, written, f.claim(t, outbox.ClaimRequest{Owner: "me"}), "replayed events are due again")
}

func testPurgeDeletesOnlyOldTerminalRows[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	written := f.write(t, JSONEvents(25, "")...)
	var updates []outbox.StatusUpdate
	for _, id := range written[:10] {
		updates = append(updates, outbox.Done(id))
	}
	for _, id := range written[10:15] {
		updates = append(updates, outbox.Dead(id, errors.New("dead")))
	}
	for _, id := range written[15:20] {
		updates = append(updates, outbox.Retry(id, Start.Add(time.Hour), errors.New("retry")))
	}
	_, err := f.Store.UpdateStatus(ctx, "", updates...)
	require.NoError(t, err)
	f.Clock.Advance(48 * time.Hour)
	// Recently finished rows are kept.
	_, err = f.Store.UpdateStatus(ctx, "", outbox.Done(written[20]), outbox.Dead(written[21], nil))
	require.NoError(t, err)

	n, err := f.Store.Purge(ctx, outbox.PurgeRequest{OlderThan: 24 * time.Hour, BatchSize: 4, Statuses: []outbox.Status{outbox.StatusDone}})
	require.NoError(t, err)
	require.EqualValues(t, 10, n, "old DONE rows only, in batches of 4")
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

	_, err = f.Store.Purge(ctx, outbox.PurgeRequest{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	_, err = f.Store.Purge(ctx, outbox.PurgeRequest{OlderThan: time.Hour, Statuses: []outbox.Status{outbox.StatusNew}})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
}

func testMalformedHeadersDoNotBreakTheBatch[Tx any](t *testing.T, f *fixture[Tx]) {
	written := f.write(t, JSONEvent(1), JSONEvent(2), JSONEvent(3))
	f.CorruptHeaders(t, written[1])

	claimed, err := f.Store.Claim(t.Context(), outbox.ClaimRequest{Owner: "me"})
	require.NoError(t, err)
	require.Equal(t, written, IDs(claimed))
	require.NoError(t, claimed[0].Malformed)
	require.Error(t, claimed[1].Malformed)
	require.Equal(t, "me", claimed[1].LockedBy, "a malformed event is claimed like any other")
	require.NoError(t, claimed[2].Malformed)

	e, err := f.Store.Get(t.Context(), written[1])
	require.NoError(t, err, "Get reports a malformed row in the event, not as an error")
	require.Error(t, e.Malformed)
}

// testBatchReadsEqualSingleReads reads rows that differ in every optional
// column in one batch, one after another: a store that decodes a batch with
// state carried from row to row must not let a row keep its predecessor's
// values.
func testBatchReadsEqualSingleReads[Tx any](t *testing.T, f *fixture[Tx]) {
	ctx := t.Context()
	full := JSONEvent(1)
	full.AggregateType, full.AggregateID, full.TenantID = "Order", "order-1", "tenant-1"
	full.Headers = map[string]string{"traceparent": "00-abc-def-01"}
	other := outbox.NewBytes("Blob", []byte{0, 1, 2})
	other.AggregateType, other.AggregateID, other.TenantID = "Invoice", "invoice-2", "tenant-2"
	other.Headers = map[string]string{"k": "v"}
	written := f.write(t, full, outbox.NewBytes("Bare", []byte{9}), other, JSONEvent(4))
	req := outbox.ClaimRequest{Owner: "me", LockTimeout: time.Minute}
	require.Len(t, f.claim(t, req), 4)
	_, err := f.Store.UpdateStatus(ctx, "me",
		outbox.Retry(written[0], f.Clock.Now(), errors.New("first failure")),
		outbox.Retry(written[2], f.Clock.Now(), nil))
	require.NoError(t, err)
	f.Clock.Advance(2 * time.Minute) // the other two come due again, still marked as claimed by me

	requireEachAsRead := func(batch []outbox.Event) {
		t.Helper()
		require.ElementsMatch(t, written, IDs(batch))
		for _, e := range batch {
			require.Equal(t, f.get(t, e.ID), e)
		}
	}
	polled, err := f.Store.PollPending(ctx, outbox.PollRequest{})
	require.NoError(t, err)
	requireEachAsRead(polled)
	claimed, err := f.Store.Claim(ctx, outbox.ClaimRequest{Owner: "you"})
	require.NoError(t, err)
	requireEachAsRead(claimed)
}

func testGetUnknownEvent[Tx any](t *testing.T, f *fixture[Tx]) {
	_, err := f.Store.Get(t.Context(), "nope")
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
	_, err = f.Store.UpdateStatus(ctx, "", outbox.Done(written[1]))
	require.NoError(t, err)
	n, oldest, err = f.Store.Backlog(ctx, "OrderCreated")
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "DONE rows are not backlog; scheduled ones are")
	require.Equal(t, Start.Add(time.Minute), oldest.UTC(), "the earliest due, not the earliest written")
	n, _, err = f.Store.Backlog(ctx, "other")
	require.NoError(t, err)
	require.Zero(t, n, "per topic")
}

func (f *fixture[Tx]) inbox(t *testing.T) outbox.Inbox[Tx] {
	t.Helper()
	inbox, ok := any(f.Store).(outbox.Inbox[Tx])
	require.True(t, ok, "the store keeps an inbox")
	return inbox
}

// markProcessed records id for consumer in a transaction of its own and
// reports whether it was new.
func (f *fixture[Tx]) markProcessed(t *testing.T, consumer, id string) bool {
	t.Helper()
	inbox := f.inbox(t)
	var first bool
	require.NoError(t, inbox.InTx(t.Context(), func(ctx context.Context, tx Tx) (err error) {
		first, err = inbox.MarkProcessed(ctx, tx, consumer, id)
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

	inbox := f.inbox(t)
	failed := errors.New("the handler failed")
	err := inbox.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
		first, err := inbox.MarkProcessed(ctx, tx, "billing", "event-2")
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
	inbox := f.inbox(t)
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

func testInboxRefusesBadInput[Tx any](t *testing.T, f *fixture[Tx]) {
	inbox := f.inbox(t)
	var none Tx
	_, err := inbox.MarkProcessed(t.Context(), none, "billing", "event-1")
	require.ErrorIs(t, err, outbox.ErrNoTransaction)
	for _, bad := range [][2]string{
		{"", "event-1"}, {"billing", ""}, {strings.Repeat("é", outbox.MaxConsumerLen+1), "event-1"},
		{"billing", "event\x00"}, {"billing", strings.Repeat("e", outbox.MaxProcessedIDLen+1)}, {"billing", "\xff"},
	} {
		err := inbox.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
			_, err := inbox.MarkProcessed(ctx, tx, bad[0], bad[1])
			return err
		})
		require.ErrorIs(t, err, outbox.ErrInvalidRequest, "%q", bad)
	}
	require.True(t, f.markProcessed(t, strings.Repeat("é", outbox.MaxConsumerLen), strings.Repeat("e", outbox.MaxProcessedIDLen)),
		"at the limits, in characters")
	_, err = inbox.PurgeProcessed(t.Context(), 0)
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
}

// Records older than the retention go, and their events are new again;
// younger ones stay.
func testInboxPurge[Tx any](t *testing.T, f *fixture[Tx]) {
	for _, id := range []string{"old-1", "old-2", "old-3"} {
		require.True(t, f.markProcessed(t, "billing", id))
	}
	f.Clock.Advance(48 * time.Hour)
	require.True(t, f.markProcessed(t, "billing", "young"))

	n, err := f.inbox(t).PurgeProcessed(t.Context(), 24*time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	require.True(t, f.markProcessed(t, "billing", "old-1"), "purged: new again")
	require.False(t, f.markProcessed(t, "billing", "young"), "kept")
}
