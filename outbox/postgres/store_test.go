package postgres_test

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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type fixture struct {
	pool   *pgxpool.Pool
	clock  *clocktest.Clock
	store  *postgres.Store
	writer *outbox.Writer[pgx.Tx]
}

func setup(t *testing.T) *fixture {
	t.Helper()
	pool := testdb.New(t)
	clock := clocktest.New(start)
	store, err := postgres.NewStore(pool, postgres.Config{Clock: clock})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{Clock: clock})
	require.NoError(t, err)
	return &fixture{pool: pool, clock: clock, store: store, writer: writer}
}

// write commits events in one transaction and returns their ids.
func (f *fixture) write(t *testing.T, events ...outbox.Envelope) []string {
	t.Helper()
	var ids []string
	err := f.store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		var err error
		ids, err = f.writer.Write(ctx, tx, events...)
		return err
	})
	require.NoError(t, err)
	return ids
}

func (f *fixture) get(t *testing.T, id string) outbox.Event {
	t.Helper()
	e, err := f.store.Get(t.Context(), id)
	require.NoError(t, err)
	return e
}

func (f *fixture) count(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, f.pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event`).Scan(&n))
	return n
}

func jsonEvent(i int) outbox.Envelope {
	return outbox.NewJSON("OrderCreated", fmt.Appendf(nil, `{"order": %d,  "note": "spaces  kept"}`, i))
}

func ids(events []outbox.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}

func TestRollbackLeavesNoRowCommitLeavesOne(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()

	boom := errors.New("business rule failed")
	err := f.store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := f.writer.Write(ctx, tx, jsonEvent(1))
		require.NoError(t, err)
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Zero(t, f.count(t))

	f.write(t, jsonEvent(2))
	require.Equal(t, 1, f.count(t))
}

func TestWriteInCallerOwnedTransaction(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()

	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	ids, err := f.writer.Write(ctx, tx, jsonEvent(1))
	require.NoError(t, err)
	require.Zero(t, f.count(t), "invisible before commit")
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, outbox.StatusNew, f.get(t, ids[0]).Status)

	tx, err = f.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = f.writer.Write(ctx, tx, jsonEvent(2))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 1, f.count(t))
}

func TestWriteWithoutTransactionFailsFast(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.writer.Write(t.Context(), nil, jsonEvent(1))
	require.ErrorIs(t, err, outbox.ErrNoTransaction)
	require.ErrorIs(t, f.store.Insert(t.Context(), nil, []outbox.Envelope{jsonEvent(1)}, outbox.Lease{}), outbox.ErrNoTransaction)
}

func TestAfterCommitHooksRunOnlyOnCommitInOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
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
	err := f.store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		require.NoError(t, outbox.AfterCommit(ctx, record("first")))
		require.NoError(t, outbox.AfterCommit(ctx, func(context.Context) error { panic("hook panics") }))
		require.NoError(t, outbox.AfterCommit(ctx, func(context.Context) error { return errors.New("hook fails") }))
		require.NoError(t, outbox.AfterCommit(ctx, record("second")))
		_, err := f.writer.Write(ctx, tx, jsonEvent(1))
		return err
	})
	require.NoError(t, err, "failing hooks never fail the commit")
	require.Equal(t, []string{"first", "second"}, got)
	require.Equal(t, 1, f.count(t))

	got = nil
	err = f.store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		require.NoError(t, outbox.AfterCommit(ctx, record("rolled back")))
		return errors.New("rollback")
	})
	require.Error(t, err)
	require.Empty(t, got)
}

func TestHotPathHookReceivesCommittedEvents(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var got []outbox.Envelope
	writer, err := outbox.NewWriter(f.store, outbox.WriterConfig{
		Clock:        f.clock,
		ClaimOwner:   "relay-a",
		ClaimTimeout: time.Minute,
		AfterCommit: func(_ context.Context, events []outbox.Envelope) error {
			got = append(got, events...)
			return nil
		},
	})
	require.NoError(t, err)
	delayed := jsonEvent(2)
	delayed.DeliverAfter = start.Add(time.Hour)
	var written []string
	require.NoError(t, f.store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		written, err = writer.Write(ctx, tx, jsonEvent(1), delayed)
		return err
	}))
	require.Len(t, got, 1)
	require.Equal(t, written[0], got[0].ID)

	hot, cold := f.get(t, written[0]), f.get(t, written[1])
	require.Equal(t, "relay-a", hot.LockedBy, "hot-path rows are written claimed by the writing relay")
	require.Equal(t, start, hot.LockedAt.UTC())
	require.Equal(t, start.Add(time.Minute), hot.AvailableAt.UTC(), "due again when the lease ends")
	require.Empty(t, cold.LockedBy, "delayed rows are never pre-claimed")

	claimed, err := f.store.Claim(t.Context(), outbox.ClaimRequest{Owner: "relay-b", LockTimeout: time.Minute})
	require.NoError(t, err)
	require.Empty(t, claimed, "another relay leaves the hot row alone while the claim is fresh")
	f.clock.Advance(time.Minute)
	claimed, err = f.store.Claim(t.Context(), outbox.ClaimRequest{Owner: "relay-b", LockTimeout: time.Minute})
	require.NoError(t, err)
	require.Equal(t, written[:1], ids(claimed), "the claim of a relay that died expires")
}

func TestInsertRoundTripsEveryField(t *testing.T) {
	t.Parallel()
	f := setup(t)
	payload := []byte("{\n  \"b\": 1, \"a\": [1,2,3],\n  \"a\": \"dup keys and spacing kept\"\n}")
	in := outbox.Envelope{
		ID:            "01ARZ3NDEKTSV4RRFFQ69G5FAV",
		Type:          "OrderCreated",
		Topic:         "orders",
		OccurredAt:    start.Add(-time.Hour),
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
	require.Equal(t, start, e.CreatedAt.UTC())
	require.Equal(t, start, e.AvailableAt.UTC())
	require.Equal(t, start, e.UpdatedAt.UTC())
	require.True(t, e.DoneAt.IsZero())
	require.NoError(t, e.Malformed)

	r := f.get(t, got[1])
	require.False(t, r.IsJSON())
	require.Equal(t, []byte{0, 1, 2, 0xff, 0}, r.PayloadBytes)
	require.Equal(t, outbox.GlobalAggregate, r.AggregateType)
	require.Equal(t, "Blob", r.Topic, "topic defaults to the event type")
	require.Empty(t, r.AggregateID)
	require.Nil(t, r.Headers)

	require.NotNil(t, f.get(t, got[2]).PayloadBytes)
	require.Empty(t, f.get(t, got[2]).PayloadBytes)
}

func TestInsertBatches(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			events := make([]outbox.Envelope, n)
			for i := range events {
				events[i] = jsonEvent(i)
			}
			written := f.write(t, events...)
			require.Len(t, written, n)
			require.Equal(t, n, f.count(t))
			if n > 0 {
				last := f.get(t, written[n-1])
				require.Equal(t, events[n-1].PayloadJSON, last.PayloadJSON)
				require.True(t, slices.IsSorted(written), "monotonic ULIDs keep the batch order")
			}
		})
	}
}

func TestPayloadSizeBoundary(t *testing.T) {
	t.Parallel()
	f := setup(t)
	exact := bytes.Repeat([]byte{'x'}, outbox.MaxPayloadSize)
	id := f.write(t, outbox.NewBytes("Big", exact))[0]
	require.Equal(t, exact, f.get(t, id).PayloadBytes)

	err := f.store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := f.writer.Write(ctx, tx, jsonEvent(1), outbox.NewBytes("Big", append(exact, 'x')))
		return err
	})
	require.ErrorIs(t, err, outbox.ErrInvalidEnvelope)
	require.Equal(t, 1, f.count(t), "nothing of the rejected batch written")
}

func TestDuplicateEventID(t *testing.T) {
	t.Parallel()
	f := setup(t)
	e := jsonEvent(1)
	e.ID = "fixed-id"
	f.write(t, e)
	err := f.store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := f.writer.Write(ctx, tx, e)
		return err
	})
	require.ErrorIs(t, err, outbox.ErrDuplicateEvent)
}

func TestStatusTransitions(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	written := f.write(t, jsonEvent(1), jsonEvent(2), jsonEvent(3), jsonEvent(4))
	done, retried, dead, deferred := written[0], written[1], written[2], written[3]
	_, err := f.store.Claim(ctx, outbox.ClaimRequest{Owner: "me"})
	require.NoError(t, err)

	f.clock.Advance(time.Second)
	now := f.clock.Now()
	long := strings.Repeat("é", 5000)
	n, err := f.store.UpdateStatus(ctx,
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

	e = f.get(t, dead)
	require.Equal(t, outbox.StatusDead, e.Status)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, "poison", e.LastError)

	e = f.get(t, deferred)
	require.Equal(t, outbox.StatusNew, e.Status, "a deferral keeps the status")
	require.Zero(t, e.Attempts, "a deferral spends no attempt")
	require.Equal(t, now.Add(time.Hour), e.AvailableAt.UTC())

	// Idempotence, and DONE is final.
	f.clock.Advance(time.Second)
	n, err = f.store.UpdateStatus(ctx, outbox.Done(done), outbox.Retry(done, now, errors.New("late")), outbox.Dead(done, nil))
	require.NoError(t, err)
	require.Zero(t, n)
	e = f.get(t, done)
	require.Equal(t, outbox.StatusDone, e.Status)
	require.Equal(t, now, e.DoneAt.UTC(), "a DONE row is never rewritten")

	n, err = f.store.UpdateStatus(ctx, outbox.Retry(retried, now.Add(2*time.Minute), errors.New("again")))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	e = f.get(t, retried)
	require.Equal(t, 2, e.Attempts)
	require.Equal(t, "again", e.LastError)

	n, err = f.store.UpdateStatus(ctx, outbox.Done(retried))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	e = f.get(t, retried)
	require.Equal(t, outbox.StatusDone, e.Status)
	require.Equal(t, "again", e.LastError, "the last failure stays readable after success")

	_, err = f.store.UpdateStatus(ctx, outbox.StatusUpdate{ID: dead, Status: outbox.StatusRetry})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	n, err = f.store.UpdateStatus(ctx, outbox.Done("no-such-event"))
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestUpdateStatusLastUpdatePerEventWins(t *testing.T) {
	t.Parallel()
	f := setup(t)
	id := f.write(t, jsonEvent(1))[0]
	n, err := f.store.UpdateStatus(t.Context(),
		outbox.Retry(id, start.Add(time.Minute), errors.New("first")), outbox.Dead(id, errors.New("second")))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	e := f.get(t, id)
	require.Equal(t, outbox.StatusDead, e.Status)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, "second", e.LastError)
}

func TestDelayedEventsInvisibleUntilDue(t *testing.T) {
	t.Parallel()
	f := setup(t)
	delayed := jsonEvent(1)
	delayed.DeliverAfter = start.Add(10 * time.Second)
	id := f.write(t, delayed)[0]
	require.Equal(t, delayed.DeliverAfter, f.get(t, id).AvailableAt.UTC())

	claim := func() []outbox.Event {
		events, err := f.store.Claim(t.Context(), outbox.ClaimRequest{Owner: "me"})
		require.NoError(t, err)
		return events
	}
	require.Empty(t, claim())
	f.clock.Advance(9 * time.Second)
	require.Empty(t, claim())
	f.clock.Advance(time.Second)
	require.Equal(t, []string{id}, ids(claim()))
}

func TestRetryAndDeferredDueAgainAtNextTime(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	written := f.write(t, jsonEvent(1), jsonEvent(2))
	_, err := f.store.UpdateStatus(ctx,
		outbox.Retry(written[0], start.Add(time.Second), errors.New("down")),
		outbox.Defer(written[1], start.Add(2*time.Second), nil))
	require.NoError(t, err)
	claim := func() []string {
		events, err := f.store.Claim(ctx, outbox.ClaimRequest{Owner: "me"})
		require.NoError(t, err)
		return ids(events)
	}
	require.Empty(t, claim())
	f.clock.Advance(time.Second)
	require.Equal(t, written[:1], claim())
	f.clock.Advance(time.Second)
	require.Equal(t, written[1:], claim())
	require.Zero(t, f.get(t, written[1]).Attempts)
}

func TestClaimLocksAndExpires(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	written := f.write(t, jsonEvent(1), jsonEvent(2), jsonEvent(3))

	a, err := f.store.Claim(ctx, outbox.ClaimRequest{Owner: "a", Limit: 2, LockTimeout: 30 * time.Second})
	require.NoError(t, err)
	require.Equal(t, written[:2], ids(a), "due order, limit honoured")
	for _, e := range a {
		require.Equal(t, "a", e.LockedBy)
		require.Equal(t, start, e.LockedAt.UTC())
		require.Equal(t, start.Add(30*time.Second), e.AvailableAt.UTC(), "the lease end")
	}
	b, err := f.store.Claim(ctx, outbox.ClaimRequest{Owner: "b", LockTimeout: 30 * time.Second})
	require.NoError(t, err)
	require.Equal(t, written[2:], ids(b), "fresh claims are not taken")

	f.clock.Advance(29 * time.Second)
	c, err := f.store.Claim(ctx, outbox.ClaimRequest{Owner: "c", LockTimeout: 30 * time.Second})
	require.NoError(t, err)
	require.Empty(t, c, "claims younger than the lock timeout hold")

	f.clock.Advance(time.Second)
	c, err = f.store.Claim(ctx, outbox.ClaimRequest{Owner: "c", LockTimeout: 30 * time.Second})
	require.NoError(t, err)
	require.ElementsMatch(t, written, ids(c), "expired claims are taken over")
	require.Equal(t, "c", f.get(t, written[0]).LockedBy)
}

func TestReleaseLetsOthersClaimAtOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	written := f.write(t, jsonEvent(1), jsonEvent(2))
	_, err := f.store.Claim(ctx, outbox.ClaimRequest{Owner: "a"})
	require.NoError(t, err)

	n, err := f.store.Release(ctx, "not-the-owner", written)
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = f.store.Release(ctx, "a", written[:1])
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	e := f.get(t, written[0])
	require.Empty(t, e.LockedBy)
	require.Equal(t, start, e.AvailableAt.UTC(), "due at once")
	b, err := f.store.Claim(ctx, outbox.ClaimRequest{Owner: "b"})
	require.NoError(t, err)
	require.Equal(t, written[:1], ids(b))
}

func TestClaimSkipsRecentEvents(t *testing.T) {
	t.Parallel()
	f := setup(t)
	old := f.write(t, jsonEvent(1))
	f.clock.Advance(time.Second)
	f.write(t, jsonEvent(2))

	polled, err := f.store.PollPending(t.Context(), outbox.PollRequest{SkipRecent: 500 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, old, ids(polled), "poll honours skip-recent")
	require.Empty(t, f.get(t, old[0]).LockedBy, "poll does not claim")

	got, err := f.store.Claim(t.Context(), outbox.ClaimRequest{Owner: "me", SkipRecent: time.Second})
	require.NoError(t, err)
	require.Equal(t, old, ids(got))
	require.Equal(t, "me", f.get(t, old[0]).LockedBy)

	polled, err = f.store.PollPending(t.Context(), outbox.PollRequest{})
	require.NoError(t, err)
	require.Len(t, polled, 1, "a claimed event is not due while its lease runs")
	require.NotEqual(t, old[0], polled[0].ID)
}

func TestClaimByTopic(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	mk := func(topic string) outbox.Envelope {
		e := jsonEvent(0)
		e.Topic = topic
		return e
	}
	written := f.write(t, mk("a"), mk("b"), mk("c"), mk("a"))

	polled, err := f.store.PollPending(ctx, outbox.PollRequest{Topics: []string{"a", "b"}})
	require.NoError(t, err)
	require.Equal(t, []string{written[0], written[1], written[3]}, ids(polled))

	one, err := f.store.Claim(ctx, outbox.ClaimRequest{Owner: "x", Topics: []string{"a"}})
	require.NoError(t, err)
	require.Equal(t, []string{written[0], written[3]}, ids(one))

	many, err := f.store.Claim(ctx, outbox.ClaimRequest{Owner: "x", Topics: []string{"b", "zzz"}})
	require.NoError(t, err)
	require.Equal(t, []string{written[1]}, ids(many))

	all, err := f.store.Claim(ctx, outbox.ClaimRequest{Owner: "x"})
	require.NoError(t, err)
	require.Equal(t, []string{written[2]}, ids(all))
}

func TestClaimRejectsBadRequests(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.store.Claim(t.Context(), outbox.ClaimRequest{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	_, err = f.store.Claim(t.Context(), outbox.ClaimRequest{Owner: "x", Limit: -1})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
}

// TestConcurrentClaimersGetDisjointSets runs 8 claimers, each on its own
// connection, against 10,000 due rows at the same time.
func TestConcurrentClaimersGetDisjointSets(t *testing.T) {
	t.Parallel()
	const rows, claimers = 10000, 8
	url := testdb.URL(t)
	ctx := t.Context()
	conns := make([]*pgx.Conn, claimers)
	for i := range conns {
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		conns[i] = conn
	}
	writerStore, err := postgres.NewStore(conns[0], postgres.Config{})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(writerStore, outbox.WriterConfig{})
	require.NoError(t, err)
	events := make([]outbox.Envelope, rows)
	for i := range events {
		events[i] = jsonEvent(i)
		events[i].Topic = "orders"
	}
	var written []string
	require.NoError(t, writerStore.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		written, err = writer.Write(ctx, tx, events...)
		return err
	}))

	got := make([][]string, claimers)
	ready := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, claimers)
	for i := range claimers {
		store, err := postgres.NewStore(conns[i], postgres.Config{})
		require.NoError(t, err)
		wg.Go(func() {
			<-ready
			for {
				batch, err := store.Claim(ctx, outbox.ClaimRequest{
					Owner: fmt.Sprint("claimer-", i), Limit: 100, Topics: []string{"orders"},
				})
				if err != nil {
					errs <- err
					return
				}
				if len(batch) == 0 {
					return
				}
				got[i] = append(got[i], ids(batch)...)
			}
		})
	}
	close(ready)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	seen := make(map[string]int, rows)
	busy := 0
	for i, claimed := range got {
		if len(claimed) > 0 {
			busy++
		}
		for _, id := range claimed {
			if prev, dup := seen[id]; dup {
				t.Fatalf("event %s claimed by %d and %d", id, prev, i)
			}
			seen[id] = i
		}
	}
	require.Len(t, seen, rows, "the union is every row")
	for _, id := range written {
		if _, ok := seen[id]; !ok {
			t.Fatalf("event %s claimed by nobody", id)
		}
	}
	t.Logf("%d of %d claimers got rows", busy, claimers)
}

func TestDeadEventsQueryCountReplay(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	mk := func(typ outbox.EventType, topic string) outbox.Envelope {
		return outbox.Envelope{Type: typ, Topic: topic, PayloadJSON: []byte(`{}`)}
	}
	written := f.write(t, mk("A", "t1"), mk("A", "t2"), mk("B", "t1"), mk("A", "t1"), mk("A", "t1"))
	_, err := f.store.UpdateStatus(ctx, outbox.Dead(written[0], errors.New("e0")), outbox.Dead(written[1], errors.New("e1")))
	require.NoError(t, err)
	f.clock.Advance(time.Hour)
	_, err = f.store.UpdateStatus(ctx, outbox.Dead(written[2], errors.New("e2")), outbox.Dead(written[3], errors.New("e3")))
	require.NoError(t, err)
	// written[4] stays NEW.

	count := func(filter outbox.DeadFilter) int64 {
		n, err := f.store.CountDead(ctx, filter)
		require.NoError(t, err)
		return n
	}
	require.EqualValues(t, 4, count(outbox.DeadFilter{}))
	require.EqualValues(t, 3, count(outbox.DeadFilter{EventType: "A"}))
	require.EqualValues(t, 2, count(outbox.DeadFilter{EventType: "A", Topic: "t1"}))
	require.EqualValues(t, 2, count(outbox.DeadFilter{DiedBefore: start.Add(time.Minute)}))
	require.EqualValues(t, 1, count(outbox.DeadFilter{IDs: []string{written[1], written[4]}}))

	var paged []string
	q := outbox.DeadQuery{Limit: 3}
	for {
		page, err := f.store.QueryDead(ctx, q)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		require.LessOrEqual(t, len(page), 3)
		paged = append(paged, ids(page)...)
		q.After = page[len(page)-1].ID
	}
	require.Equal(t, written[:4], paged)

	page, err := f.store.QueryDead(ctx, outbox.DeadQuery{DeadFilter: outbox.DeadFilter{EventType: "B"}})
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, "e2", page[0].LastError)
	require.Equal(t, 1, page[0].Attempts)

	f.clock.Advance(time.Minute)
	n, err := f.store.ReplayDead(ctx, outbox.DeadFilter{EventType: "A", Topic: "t1"})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	e := f.get(t, written[0])
	require.Equal(t, outbox.StatusNew, e.Status)
	require.Zero(t, e.Attempts)
	require.Equal(t, "e0", e.LastError, "replay keeps the error as history")
	require.Equal(t, f.clock.Now(), e.AvailableAt.UTC())
	require.EqualValues(t, 2, count(outbox.DeadFilter{}))

	claimed, err := f.store.Claim(ctx, outbox.ClaimRequest{Owner: "me"})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{written[0], written[3], written[4]}, ids(claimed), "replayed events are due again")
}

func TestPurgeDeletesOnlyOldTerminalRows(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	events := make([]outbox.Envelope, 25)
	for i := range events {
		events[i] = jsonEvent(i)
	}
	written := f.write(t, events...)
	var updates []outbox.StatusUpdate
	for _, id := range written[:10] {
		updates = append(updates, outbox.Done(id))
	}
	for _, id := range written[10:15] {
		updates = append(updates, outbox.Dead(id, errors.New("dead")))
	}
	for _, id := range written[15:20] {
		updates = append(updates, outbox.Retry(id, start.Add(time.Hour), errors.New("retry")))
	}
	_, err := f.store.UpdateStatus(ctx, updates...)
	require.NoError(t, err)
	f.clock.Advance(48 * time.Hour)
	// Recently finished rows are kept.
	_, err = f.store.UpdateStatus(ctx, outbox.Done(written[20]), outbox.Dead(written[21], nil))
	require.NoError(t, err)

	n, err := f.store.Purge(ctx, outbox.PurgeRequest{OlderThan: 24 * time.Hour, BatchSize: 4, Statuses: []outbox.Status{outbox.StatusDone}})
	require.NoError(t, err)
	require.EqualValues(t, 10, n, "old DONE rows only, in batches of 4")
	n, err = f.store.Purge(ctx, outbox.PurgeRequest{OlderThan: 24 * time.Hour, BatchSize: 4})
	require.NoError(t, err)
	require.EqualValues(t, 5, n, "then the old DEAD rows")
	require.Equal(t, 10, f.count(t))
	for _, id := range written[15:] {
		f.get(t, id)
	}

	_, err = f.store.Purge(ctx, outbox.PurgeRequest{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	_, err = f.store.Purge(ctx, outbox.PurgeRequest{OlderThan: time.Hour, Statuses: []outbox.Status{outbox.StatusNew}})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
}

func TestMalformedHeadersDoNotBreakTheBatch(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	written := f.write(t, jsonEvent(1), jsonEvent(2), jsonEvent(3))
	_, err := f.pool.Exec(ctx, `UPDATE outbox_event SET headers = '{"a": 1}' WHERE event_id = $1`, written[1])
	require.NoError(t, err)

	claimed, err := f.store.Claim(ctx, outbox.ClaimRequest{Owner: "me"})
	require.NoError(t, err)
	require.Equal(t, written, ids(claimed))
	require.NoError(t, claimed[0].Malformed)
	require.Error(t, claimed[1].Malformed)
	require.NoError(t, claimed[2].Malformed)
}

func TestGetUnknownEvent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.store.Get(t.Context(), "nope")
	require.ErrorIs(t, err, outbox.ErrNotFound)
}

func TestConfigRejectsBadIdentifiers(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	for _, cfg := range []postgres.Config{
		{Table: `outbox"; DROP TABLE outbox_event; --`},
		{Table: "Outbox"},
		{Schema: "public; DROP", Table: "x"},
		{Table: strings.Repeat("a", 49)},
	} {
		_, err := postgres.NewStore(pool, cfg)
		require.ErrorIs(t, err, postgres.ErrInvalidIdentifier, "%+v", cfg)
		require.ErrorIs(t, postgres.Migrate(t.Context(), pool, cfg), postgres.ErrInvalidIdentifier)
	}
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event`).Scan(&n))
}

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := t.Context()
	// The template is migrated already: a second run is a no-op.
	require.NoError(t, postgres.Migrate(ctx, pool, postgres.Config{}))

	_, err := pool.Exec(ctx, `CREATE SCHEMA billing`)
	require.NoError(t, err)
	cfg := postgres.Config{Schema: "billing", Table: "events"}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = postgres.Migrate(ctx, pool, cfg) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	var versions int
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT count(*) FROM billing.wmoutbox_migration WHERE table_name = 'events'`).Scan(&versions))
	migrations, err := postgres.Migrations(cfg)
	require.NoError(t, err)
	require.Equal(t, len(migrations), versions, "each migration recorded once")

	clock := clocktest.New(start)
	store, err := postgres.NewStore(pool, postgres.Config{Schema: "billing", Table: "events", Clock: clock})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{Clock: clock})
	require.NoError(t, err)
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, jsonEvent(1))
		return err
	}))
	claimed, err := store.Claim(ctx, outbox.ClaimRequest{Owner: "me"})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	var inDefault int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox_event`).Scan(&inDefault))
	require.Zero(t, inDefault, "the configured table is used, not the default one")
}

func TestMigrateTxInCallerTransaction(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := t.Context()
	cfg := postgres.Config{Table: "rolled_back"}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, postgres.MigrateTx(ctx, tx, cfg))
	require.NoError(t, tx.Rollback(ctx))
	var exists bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass('rolled_back') IS NOT NULL`).Scan(&exists))
	require.False(t, exists, "MigrateTx leaves the commit to the caller")
}

func TestClaimReturnsDueOrderNotIDOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	older := f.write(t, jsonEvent(1))[0]
	f.clock.Advance(time.Second)
	newer := f.write(t, jsonEvent(2))[0]
	_, err := f.store.UpdateStatus(ctx, outbox.Retry(older, f.clock.Now().Add(time.Second), errors.New("down")))
	require.NoError(t, err)
	f.clock.Advance(2 * time.Second)

	claimed, err := f.store.Claim(ctx, outbox.ClaimRequest{Owner: "me"})
	require.NoError(t, err)
	require.Equal(t, []string{newer, older}, ids(claimed), "the retried event is due after the newer one")
}

func TestBacklog(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	n, oldest, err := f.store.Backlog(ctx, "OrderCreated")
	require.NoError(t, err)
	require.Zero(t, n)
	require.True(t, oldest.IsZero())

	written := f.write(t, jsonEvent(1))
	f.clock.Advance(time.Minute)
	f.write(t, jsonEvent(2), jsonEvent(3))
	_, err = f.store.UpdateStatus(ctx, outbox.Done(written[0]))
	require.NoError(t, err)
	n, oldest, err = f.store.Backlog(ctx, "OrderCreated")
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "DONE rows are not backlog")
	require.Equal(t, start.Add(time.Minute), oldest.UTC())
}
