package outbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

var writerStart = time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)

// writerBundle is a writer with a hot path and Notify, on a store on a
// fake driver, with a fake clock.
type writerBundle struct {
	writer *outbox.Writer[*fakeTx]
	store  *outbox.Store[*fakeTx]
	driver *fakeDriver[*fakeTx]
	hot    *fakeHotPath
	notify *notifyLog
	clock  *clocktest.Clock
}

// setupWriter returns a writer whose hot path, owner "relay-1", takes
// every topic under the default lease (HotLease returns 0), and tells
// Notify; modify changes the config before the writer is built.
func setupWriter(t *testing.T, modify func(cfg *outbox.WriterConfig)) *writerBundle {
	t.Helper()

	b := &writerBundle{driver: newDriver(), hot: &fakeHotPath{owner: "relay-1"}, notify: &notifyLog{}, clock: clocktest.New(writerStart)}
	store, err := outbox.NewStore[*fakeTx](b.driver, outbox.StoreConfig{Clock: b.clock})
	require.NoError(t, err)
	cfg := outbox.WriterConfig{HotPath: b.hot, Notify: b.notify.notify}
	if modify != nil {
		modify(&cfg)
	}
	w, err := outbox.NewWriter(store, cfg)
	require.NoError(t, err)
	b.store, b.writer = store, w
	return b
}

// write writes events in a transaction of the store's InTx and returns
// their ids.
func (b *writerBundle) write(t *testing.T, events ...outbox.Envelope) []string {
	t.Helper()
	var ids []string
	require.NoError(t, b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) (err error) {
		ids, err = b.writer.Write(ctx, tx, events...)
		return err
	}))
	return ids
}

// insert returns the params of the only insert so far.
func (b *writerBundle) insert(t *testing.T) outboxdriver.InsertParams {
	t.Helper()
	inserts := b.driver.Inserts()
	require.Len(t, inserts, 1, "one insert for the batch")
	return inserts[0].p
}

// requireNothingTold fails unless neither the hot path nor Notify heard
// of any event.
func (b *writerBundle) requireNothingTold(t *testing.T, why string) {
	t.Helper()
	require.Empty(t, b.hot.Hot(), why)
	require.Empty(t, b.hot.CommittedEvents(), why)
	require.Empty(t, b.notify.Calls(), why)
}

// validEnvelope returns an envelope that the writer accepts.
func validEnvelope() outbox.Envelope {
	return outbox.NewJSON("OrderCreated", []byte(`{"order":42}`))
}

// withTopic returns a valid envelope of topic.
func withTopic(topic string) outbox.Envelope {
	e := validEnvelope()
	e.Topic = topic
	return e
}

// idsOf returns the ids of events.
func idsOf(events []outbox.Envelope) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}

// rowIDs returns the ids of rows.
func rowIDs(rows []outboxdriver.InsertRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

// topics returns the topics of events.
func topics(events []outbox.Envelope) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Topic
	}
	return out
}

func TestNewWriter(t *testing.T) {
	t.Parallel()

	_, err := outbox.NewWriter[*fakeTx](nil, outbox.WriterConfig{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)

	store, err := outbox.NewStore[*fakeTx](newDriver(), outbox.StoreConfig{})
	require.NoError(t, err)
	w, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	require.NotNil(t, w)
}

// A nil pointer in the HotPath interface is no hot path: the writer does
// not call it, and writes every event unclaimed.
func TestWriterTypedNilHotPath(t *testing.T) {
	t.Parallel()

	var none *fakeHotPath
	b := setupWriter(t, func(cfg *outbox.WriterConfig) { cfg.HotPath = none })
	b.write(t, validEnvelope())
	p := b.insert(t)
	require.False(t, p.Rows[0].Claimed)
	require.False(t, p.Mark)
	require.Equal(t, [][]string{{"OrderCreated"}}, b.notify.Calls(), "Notify still hears of the event")
}

func TestWriterNilTx(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	ids, err := b.writer.Write(t.Context(), nil, validEnvelope())
	require.ErrorIs(t, err, outbox.ErrNoTransaction)
	require.Nil(t, ids)

	_, err = b.writer.Write(t.Context(), nil)
	require.ErrorIs(t, err, outbox.ErrNoTransaction, "even with no events")
	require.Empty(t, b.driver.Log())
}

// committer is an interface transaction type, as pgx.Tx is.
type committer interface{ Commit(context.Context) error }

type fakeCommitter struct{}

func (*fakeCommitter) Commit(context.Context) error { return nil }

func TestWriterNilTxOfOtherTypes(t *testing.T) {
	t.Parallel()

	t.Run("interface", func(t *testing.T) {
		t.Parallel()

		d := &fakeDriver[committer]{newTx: func() committer { return &fakeCommitter{} }}
		store, err := outbox.NewStore[committer](d, outbox.StoreConfig{})
		require.NoError(t, err)
		w, err := outbox.NewWriter(store, outbox.WriterConfig{})
		require.NoError(t, err)

		_, err = w.Write(t.Context(), nil, validEnvelope())
		require.ErrorIs(t, err, outbox.ErrNoTransaction)
		var typedNil *fakeCommitter
		_, err = w.Write(t.Context(), typedNil, validEnvelope())
		require.ErrorIs(t, err, outbox.ErrNoTransaction, "a nil pointer in the interface")
		require.Empty(t, d.Inserts())

		_, err = w.Write(t.Context(), &fakeCommitter{}, validEnvelope())
		require.NoError(t, err)
		require.Len(t, d.Inserts(), 1)
	})

	t.Run("value type", func(t *testing.T) {
		t.Parallel()

		type handle struct{ _ int }
		d := &fakeDriver[handle]{newTx: func() handle { return handle{} }}
		store, err := outbox.NewStore[handle](d, outbox.StoreConfig{})
		require.NoError(t, err)
		w, err := outbox.NewWriter(store, outbox.WriterConfig{})
		require.NoError(t, err)
		_, err = w.Write(t.Context(), handle{}, validEnvelope())
		require.NoError(t, err, "a zero struct is a transaction handle, not a missing one")
		require.Len(t, d.Inserts(), 1)
	})
}

func TestWriterInvalidEnvelope(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	ids, err := b.writer.Write(t.Context(), &fakeTx{}, validEnvelope(), validEnvelope(), outbox.Envelope{Type: "NoPayload"})
	require.ErrorIs(t, err, outbox.ErrInvalidEnvelope)
	var verr *outbox.ValidationError
	require.ErrorAs(t, err, &verr)
	require.Equal(t, 2, verr.Index)
	require.Equal(t, "PayloadJSON", verr.Field)
	require.Nil(t, ids)
	require.Empty(t, b.driver.Log(), "nothing of the batch is written")
}

func TestWriterNoEvents(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	require.Empty(t, b.write(t))
	require.Equal(t, []string{"begin", "commit"}, b.driver.Log(), "no insert")
	b.requireNothingTold(t, "no events, nothing to tell")
}

func TestWriterWrite(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, func(cfg *outbox.WriterConfig) { cfg.HotPath = nil })
	tx := &fakeTx{id: 3}
	given := validEnvelope()
	given.ID = "my-own-id"
	ids, err := b.writer.Write(t.Context(), tx, validEnvelope(), given, validEnvelope())
	require.NoError(t, err)
	require.Len(t, ids, 3)
	require.Equal(t, "my-own-id", ids[1])
	require.Less(t, ids[0], ids[2])

	inserts := b.driver.Inserts()
	require.Len(t, inserts, 1, "one insert for the batch")
	require.Same(t, tx, inserts[0].tx)
	p := inserts[0].p
	require.Equal(t, writerStart, p.Now, "the store's clock stamps the write")
	require.Empty(t, p.Owner, "no hot path, no claim")
	require.Zero(t, p.LockedUntil)
	require.False(t, p.Mark, "no hot rows, no savepoint mark")
	require.Equal(t, ids, rowIDs(p.Rows), "ids are returned in order")
	for _, r := range p.Rows {
		require.Equal(t, writerStart, r.OccurredAt, "the store's clock stamps OccurredAt")
		require.Equal(t, writerStart, r.AvailableAt, "due at once")
		require.Equal(t, "OrderCreated", r.Topic)
		require.Equal(t, string(outbox.GlobalAggregate), r.AggregateType)
		require.False(t, r.Claimed)
	}
}

// Each row holds its envelope as prepared, in the driver's terms.
func TestWriterRows(t *testing.T) {
	t.Parallel()

	occurred := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	later := writerStart.Add(time.Hour)
	tests := []struct {
		name string
		in   outbox.Envelope
		want outboxdriver.InsertRow
	}{
		{
			name: "defaults",
			in:   outbox.Envelope{ID: "e1", Type: "OrderCreated", PayloadJSON: []byte(`{"order":42}`)},
			want: outboxdriver.InsertRow{ID: "e1", Type: "OrderCreated", Topic: "OrderCreated", AggregateType: "__GLOBAL__",
				Payload: []byte(`{"order":42}`), PayloadJSON: true, OccurredAt: writerStart, AvailableAt: writerStart},
		},
		{
			name: "every field",
			in: outbox.Envelope{ID: "e2", Type: "OrderCreated", Topic: "orders", OccurredAt: occurred, AggregateType: "Order",
				AggregateID: "42", TenantID: "acme", Headers: map[string]string{"trace": "abc"}, PayloadBytes: []byte("raw"),
				DeliverAfter: later},
			want: outboxdriver.InsertRow{ID: "e2", Type: "OrderCreated", Topic: "orders", AggregateType: "Order",
				AggregateID: "42", TenantID: "acme", Headers: `{"trace":"abc"}`, Payload: []byte("raw"),
				OccurredAt: occurred, AvailableAt: later},
		},
		{
			name: "empty payload, no headers",
			in:   outbox.Envelope{ID: "e3", Type: "Blob", Headers: map[string]string{}, PayloadBytes: []byte{}},
			want: outboxdriver.InsertRow{ID: "e3", Type: "Blob", Topic: "Blob", AggregateType: "__GLOBAL__",
				Payload: []byte{}, OccurredAt: writerStart, AvailableAt: writerStart},
		},
		{
			name: "DeliverAfter past is due at once",
			in:   outbox.Envelope{ID: "e4", Type: "Blob", PayloadBytes: []byte("x"), DeliverAfter: writerStart.Add(-time.Hour)},
			want: outboxdriver.InsertRow{ID: "e4", Type: "Blob", Topic: "Blob", AggregateType: "__GLOBAL__",
				Payload: []byte("x"), OccurredAt: writerStart, AvailableAt: writerStart},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setupWriter(t, func(cfg *outbox.WriterConfig) { cfg.HotPath = nil })
			_, err := b.writer.Write(t.Context(), &fakeTx{}, tt.in)
			require.NoError(t, err)
			require.Equal(t, []outboxdriver.InsertRow{tt.want}, b.insert(t).Rows)
		})
	}
}

func TestWriterDriverError(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	insertErr := errors.New("connection reset")
	b.driver.insertErr = insertErr

	require.NoError(t, b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		ids, err := b.writer.Write(ctx, tx, validEnvelope())
		require.ErrorIs(t, err, insertErr)
		require.NotSame(t, insertErr, err)
		require.ErrorContains(t, err, "write 1 events")
		require.Nil(t, ids)

		b.driver.set(func(d *fakeDriver[*fakeTx]) { d.insertErr = outbox.ErrDuplicateEvent })
		_, err = b.writer.Write(ctx, tx, validEnvelope(), withTopic("billing"))
		require.ErrorIs(t, err, outbox.ErrDuplicateEvent)
		return nil // commit anyway
	}))
	b.requireNothingTold(t, "a failed write hands nothing to the hot path")
}

// Write registers its hand-off in the transaction of ctx: once that
// transaction has ended, it fails, though it wrote the rows.
func TestWriterAfterTheTransactionEnded(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	var (
		ended context.Context
		tx    *fakeTx
	)
	require.NoError(t, b.store.InTx(t.Context(), func(ctx context.Context, txn *fakeTx) error {
		ended, tx = ctx, txn
		return nil
	}))
	b.hot.cold = map[string]bool{"billing": true}
	for _, e := range []outbox.Envelope{validEnvelope(), withTopic("billing")} {
		ids, err := b.writer.Write(ended, tx, e)
		require.ErrorIs(t, err, outbox.ErrNoCommitHooks, "topic %s", e.Topic)
		require.Nil(t, ids)
	}
	require.Len(t, b.driver.Inserts(), 2)
	require.Empty(t, b.hot.Hot())
	require.Empty(t, b.hot.CommittedEvents())
}

func TestWriterHotOnlyAfterCommit(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	var ids []string
	require.NoError(t, b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		var err error
		ids, err = b.writer.Write(ctx, tx, validEnvelope(), validEnvelope())
		require.NoError(t, err)
		require.Empty(t, b.hot.Hot(), "not before the commit")
		return nil
	}))

	hot := b.hot.Hot()
	require.Len(t, hot, 1)
	require.Equal(t, ids, idsOf(hot[0]))
	for _, e := range hot[0] {
		require.Equal(t, "OrderCreated", e.Topic, "the hot path gets prepared envelopes")
		require.Equal(t, writerStart, e.OccurredAt)
	}
	require.Empty(t, b.hot.CommittedEvents(), "no cold event to tell of")
	require.Empty(t, b.notify.Calls(), "nor to notify")
	require.Equal(t, []string{"begin", "insert", "commit"}, b.driver.Log())
}

// Hot rows are written claimed by the hot path, for its lease from the
// write: the one HotLease returns, or 5 minutes when it returns 0.
func TestWriterClaimsHotRows(t *testing.T) {
	t.Parallel()

	for name, tt := range map[string]struct {
		lease, want time.Duration
	}{
		"default lease": {lease: 0, want: 5 * time.Minute},
		"given lease":   {lease: 30 * time.Second, want: 30 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			b := setupWriter(t, nil)
			b.hot.lease = tt.lease
			b.clock.Advance(time.Minute)
			b.write(t, validEnvelope())
			p := b.insert(t)
			require.Equal(t, "relay-1", p.Owner)
			require.Equal(t, writerStart.Add(time.Minute), p.Now)
			require.Equal(t, p.Now.Add(tt.want), p.LockedUntil)
			require.True(t, p.Rows[0].Claimed)
			require.True(t, p.Mark, "hot rows ask for the savepoint mark")
		})
	}
}

// The hot path learns how much of the events' claim is left at the
// commit: the claim began at the write, and a transaction that stays open
// spends it, on the store's clock.
func TestWriterHotPathGetsWhatIsLeftOfTheClaim(t *testing.T) {
	t.Parallel()

	for name, tt := range map[string]struct {
		lease, want time.Duration
	}{
		"default lease": {lease: 0, want: 5*time.Minute - 3*time.Minute},
		"given lease":   {lease: 10 * time.Minute, want: 10*time.Minute - 3*time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			b := setupWriter(t, nil)
			b.hot.lease = tt.lease
			require.NoError(t, b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
				_, err := b.writer.Write(ctx, tx, validEnvelope())
				b.clock.Advance(3 * time.Minute) // the transaction stays open
				return err
			}))
			require.Equal(t, []time.Duration{tt.want}, b.hot.ClaimLeft())
		})
	}
}

func TestWriterNothingAfterRollback(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	rollback := errors.New("rollback please")
	err := b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		_, err := b.writer.Write(ctx, tx, validEnvelope(), withTopic("billing"))
		require.NoError(t, err)
		return rollback
	})
	require.ErrorIs(t, err, rollback)
	require.Equal(t, []string{"begin", "insert", "rollback"}, b.driver.Log())
	b.requireNothingTold(t, "not after a rollback")
}

// In a transaction the caller begins and commits, nobody reports the
// commit: the writer leaves every event to the relays' claims.
func TestWriterNothingOutsideInTx(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	tx := &fakeTx{}
	ctx := outbox.ContextWithTx(t.Context(), tx)
	_, err := b.writer.Write(ctx, tx, validEnvelope(), withTopic("billing"))
	require.NoError(t, err)
	p := b.insert(t)
	require.Empty(t, p.Owner)
	require.False(t, p.Mark)
	for _, r := range p.Rows {
		require.False(t, r.Claimed)
	}
	b.requireNothingTold(t, "nobody reports the commit of a caller's transaction")
}

func TestWriterHotPathPerWrite(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	var first, second []string
	require.NoError(t, b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		var err error
		first, err = b.writer.Write(ctx, tx, validEnvelope())
		require.NoError(t, err)
		second, err = b.writer.Write(ctx, tx, validEnvelope(), validEnvelope())
		return err
	}))
	hot := b.hot.Hot()
	require.Len(t, hot, 2, "one hand-over per write, in write order")
	require.Equal(t, first, idsOf(hot[0]))
	require.Equal(t, second, idsOf(hot[1]))
}

func TestWriterHotPathGetsCopies(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	headers := map[string]string{"trace": "abc"}
	jsonPayload := []byte(`{"order":42}`)
	bytesPayload := []byte("raw")
	events := []outbox.Envelope{
		{Type: "OrderCreated", Headers: headers, PayloadJSON: jsonPayload},
		{Type: "Blob", PayloadBytes: bytesPayload},
	}
	require.NoError(t, b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		_, err := b.writer.Write(ctx, tx, events...)
		require.NoError(t, err)

		// The caller reuses its data before the commit.
		headers["trace"] = "changed"
		headers["new"] = "x"
		copy(jsonPayload, `{"order":99}`)
		bytesPayload[0] = 'X'
		events[0].Topic = "changed"
		return nil
	}))

	hot := b.hot.Hot()
	require.Len(t, hot, 1)
	got := hot[0]
	require.Equal(t, map[string]string{"trace": "abc"}, got[0].Headers)
	require.Equal(t, `{"order":42}`, string(got[0].PayloadJSON))
	require.Equal(t, "OrderCreated", got[0].Topic)
	require.Equal(t, "raw", string(got[1].PayloadBytes))

	rows := b.insert(t).Rows
	require.JSONEq(t, `{"trace":"abc"}`, rows[0].Headers)
	require.Equal(t, `{"order":42}`, string(rows[0].Payload))
	require.Equal(t, "raw", string(rows[1].Payload))
}

// Delayed events are never hot: written unclaimed, after the hot rows,
// due at their DeliverAfter, and told to the hot path as committed.
func TestWriterDelayedEventsAreNeverHot(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	delayed := validEnvelope()
	delayed.DeliverAfter = writerStart.Add(time.Hour)
	ids := b.write(t, validEnvelope(), delayed, validEnvelope())

	rows := b.insert(t).Rows
	require.Equal(t, []string{ids[0], ids[2], ids[1]}, rowIDs(rows), "hot rows first, in one insert")
	require.True(t, rows[0].Claimed)
	require.True(t, rows[1].Claimed)
	require.False(t, rows[2].Claimed, "the delayed event is written")
	require.Equal(t, delayed.DeliverAfter, rows[2].AvailableAt, "due at its DeliverAfter")

	hot := b.hot.Hot()
	require.Len(t, hot, 1)
	require.Equal(t, []string{ids[0], ids[2]}, idsOf(hot[0]), "but never delivered on the hot path")
	committed := b.hot.CommittedEvents()
	require.Len(t, committed, 1)
	require.Equal(t, []string{ids[1]}, idsOf(committed[0]))
	require.Equal(t, delayed.DeliverAfter, committed[0][0].DeliverAfter)
	require.Empty(t, b.notify.Calls(), "nothing due to notify of")
}

func TestWriterClaims(t *testing.T) {
	t.Parallel()

	now := validEnvelope()
	later := validEnvelope()
	later.DeliverAfter = writerStart.Add(time.Minute)

	tests := []struct {
		name       string
		noHotPath  bool
		owner      string
		callersTx  bool // written in a transaction no InTx commits
		topicOff   bool
		events     []outbox.Envelope
		claimed    int // how many of the events are written claimed by relay-1
		wantHot    int // how many are handed to the hot path
		wantLookup bool
	}{
		{name: "hot path", owner: "relay-1", events: []outbox.Envelope{now}, claimed: 1, wantHot: 1},
		{name: "hot path with some delayed events", owner: "relay-1", events: []outbox.Envelope{later, now, now}, claimed: 2, wantHot: 2},
		{name: "only delayed events", owner: "relay-1", events: []outbox.Envelope{later, later}},
		{name: "topic the hot path does not take", owner: "relay-1", topicOff: true, events: []outbox.Envelope{now}},
		{name: "no hot path", noHotPath: true, owner: "relay-1", events: []outbox.Envelope{now}},
		{name: "caller-owned transaction", owner: "relay-1", callersTx: true, events: []outbox.Envelope{now}},
		{name: "hot path without an owner: unclaimed, so not hot", events: []outbox.Envelope{now}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setupWriter(t, func(cfg *outbox.WriterConfig) {
				if tt.noHotPath {
					cfg.HotPath = nil
				}
			})
			b.hot.owner = tt.owner
			if tt.topicOff {
				b.hot.cold = map[string]bool{"OrderCreated": true}
			}
			if tt.callersTx {
				_, err := b.writer.Write(t.Context(), &fakeTx{}, tt.events...)
				require.NoError(t, err)
			} else {
				b.write(t, tt.events...)
			}

			p := b.insert(t)
			claimed := 0
			for _, r := range p.Rows {
				if r.Claimed {
					claimed++
					require.Equal(t, "relay-1", p.Owner)
					require.Equal(t, writerStart.Add(5*time.Minute), p.LockedUntil)
				}
			}
			require.Equal(t, tt.claimed, claimed)
			require.Equal(t, tt.wantHot > 0, p.Mark, "a mark only for hot rows")
			if tt.wantHot == 0 {
				require.Empty(t, b.hot.Hot())
				return
			}
			require.Len(t, b.hot.Hot(), 1)
			require.Len(t, b.hot.Hot()[0], tt.wantHot)
		})
	}
}

func TestWriterConcurrentWrites(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	require.NoError(t, b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				if _, err := b.writer.Write(ctx, tx, validEnvelope()); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		return nil
	}))
	require.Len(t, b.driver.Inserts(), 20)
	hot := b.hot.Hot()
	require.Len(t, hot, 20)

	seen := make(map[string]bool)
	for _, events := range hot {
		require.False(t, seen[events[0].ID], "ids are unique")
		seen[events[0].ID] = true
	}
}

// Events written through a transaction other than the one the InTx in ctx
// commits (a savepoint that may roll back, another connection's) are not
// that commit's to hand over.
func TestWriterHotOnlyForTheCommittedTx(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	require.NoError(t, b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		other := &fakeTx{id: 2}
		_, err := b.writer.Write(ctx, other, validEnvelope(), withTopic("billing"))
		return err
	}))
	p := b.insert(t)
	require.Empty(t, p.Owner)
	require.False(t, p.Rows[0].Claimed)
	b.requireNothingTold(t, "events of another transaction are not the InTx commit's to deliver")
}

// Rows in the top-level transaction commit with it: the writer asks the
// driver nothing more.
func TestWriterLooksUpNothingWrittenInTheTopLevelTransaction(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	b.write(t, validEnvelope(), validEnvelope())
	require.True(t, b.insert(t).Mark)
	require.Len(t, b.hot.Hot(), 1)
	require.Empty(t, b.driver.Kepts())
}

// A driver that cannot tell whether a write went into a savepoint (SQLite)
// marks every hot write: the writer looks its rows up in the transaction
// just before its commit.
func TestWriterLooksUpMarkedWritesBeforeTheCommit(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	b.driver.mark = 3
	ids := b.write(t, validEnvelope(), validEnvelope())
	require.Equal(t, []string{"begin", "insert", "kept", "commit"}, b.driver.Log())
	kepts := b.driver.Kepts()
	require.Len(t, kepts, 1)
	require.Same(t, b.driver.tx, kepts[0].tx)
	require.EqualValues(t, 3, kepts[0].savepoint)
	require.Equal(t, ids, kepts[0].ids)
	require.Len(t, b.hot.Hot(), 1)
	require.Equal(t, ids, idsOf(b.hot.Hot()[0]))
}

// Rows in a savepoint can roll back while the transaction commits: the
// hot path takes those the top-level transaction still holds just before
// it commits.
func TestWriterHandsOverOnlyWhatSavepointsKept(t *testing.T) {
	t.Parallel()

	// A store whose transactions are savepoints, as a PostgreSQL store on a
	// pgx.Tx, and a writer on it; the InTx of top's store runs the
	// top-level transaction.
	top := setupTx(t, nil)
	b := setupWriter(t, nil)
	b.driver.mark = 7
	inSavepoint := func(t *testing.T, fn func(ctx context.Context, tx *fakeTx) error) error {
		return top.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
			b.driver.set(func(d *fakeDriver[*fakeTx]) { d.outer = tx })
			return b.store.InTx(ctx, fn)
		})
	}

	first, second := validEnvelope(), validEnvelope()
	first.ID, second.ID = "rolled back", "kept"
	b.driver.gone = map[string]bool{first.ID: true}
	require.NoError(t, inSavepoint(t, func(ctx context.Context, tx *fakeTx) error {
		_, err := b.writer.Write(ctx, tx, first, second)
		return err
	}))
	kepts := b.driver.Kepts()
	require.Len(t, kepts, 1)
	require.Same(t, top.driver.tx, kepts[0].tx, "looked up in the top-level transaction, the savepoint being over")
	require.Equal(t, []string{"rolled back", "kept"}, kepts[0].ids)
	require.EqualValues(t, 7, kepts[0].savepoint, "asked about the write's savepoint")
	require.Len(t, b.hot.Hot(), 1)
	require.Equal(t, []string{"kept"}, idsOf(b.hot.Hot()[0]))
	require.Equal(t, []string{"begin", "commit"}, top.driver.Log())

	b.driver.set(func(d *fakeDriver[*fakeTx]) { d.gone[second.ID] = true })
	require.NoError(t, inSavepoint(t, func(ctx context.Context, tx *fakeTx) error {
		_, err := b.writer.Write(ctx, tx, first, second)
		return err
	}))
	require.Len(t, b.hot.Hot(), 1, "nothing left to hand over, no call")
	require.Len(t, b.driver.Kepts(), 2)

	rolledBack := errors.New("savepoint rolled back")
	require.NoError(t, top.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		b.driver.set(func(d *fakeDriver[*fakeTx]) { d.outer = tx })
		err := b.store.InTx(ctx, func(ctx context.Context, tx *fakeTx) error {
			_, err := b.writer.Write(ctx, tx, validEnvelope())
			require.NoError(t, err)
			return rolledBack
		})
		require.ErrorIs(t, err, rolledBack)
		return nil
	}))
	require.Len(t, b.driver.Kepts(), 2, "nothing to look up for a savepoint rolled back")
	require.Len(t, b.hot.Hot(), 1)
}

// A lookup that fails leaves the transaction uncommitted: committed, its
// hot rows would stay claimed for the whole lease.
func TestWriterLookupFailureRollsBack(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	b.driver.mark = 7
	b.driver.keptErr = errors.New("connection lost")
	err := b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		require.NoError(t, outbox.AfterRollback(ctx, b.driver.hook("after rollback")))
		_, err := b.writer.Write(ctx, tx, validEnvelope(), withTopic("billing"))
		return err
	})
	require.ErrorIs(t, err, b.driver.keptErr)
	require.ErrorContains(t, err, "before commit")
	require.Equal(t, []string{"begin", "insert", "kept", "rollback", "after rollback"}, b.driver.Log())
	b.requireNothingTold(t, "the transaction rolled back")
}

// After the commit the hot path hears of the other events, due or
// delayed, and Notify of the topics of those due, once each in the order
// they first appear.
func TestWriterTellsTheColdEventsAfterCommitOnly(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	b.hot.cold = map[string]bool{"billing": true, "shipping": true, "later": true}
	delayed := withTopic("later")
	delayed.DeliverAfter = writerStart.Add(time.Hour)
	write := func(ctx context.Context, tx *fakeTx) error {
		_, err := b.writer.Write(ctx, tx, withTopic("served-here"), withTopic("shipping"), withTopic("billing"),
			withTopic("shipping"), delayed)
		return err
	}

	require.NoError(t, b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		require.NoError(t, write(ctx, tx))
		require.Empty(t, b.hot.CommittedEvents(), "nothing before the commit")
		require.Empty(t, b.notify.Calls())
		return nil
	}))
	committed := b.hot.CommittedEvents()
	require.Len(t, committed, 1)
	require.Equal(t, []string{"shipping", "billing", "shipping", "later"}, topics(committed[0]),
		"the events the hot path did not take, due or delayed")
	require.Equal(t, [][]string{{"shipping", "billing"}}, b.notify.Calls(),
		"hot and delayed events are not notified")
	require.Len(t, b.hot.Hot(), 1)
	require.Equal(t, []string{"served-here"}, topics(b.hot.Hot()[0]))

	rollback := errors.New("rollback please")
	require.ErrorIs(t, b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		require.NoError(t, write(ctx, tx))
		return rollback
	}), rollback)
	tx := &fakeTx{}
	require.NoError(t, write(outbox.ContextWithTx(t.Context(), tx), tx))
	require.Len(t, b.hot.CommittedEvents(), 1, "not after a rollback, nor for a transaction whose commit nobody reports")
	require.Len(t, b.notify.Calls(), 1)
}

// Without a hot path, Notify hears of every due event.
func TestWriterNotifyWithoutHotPath(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, func(cfg *outbox.WriterConfig) { cfg.HotPath = nil })
	delayed := withTopic("later")
	delayed.DeliverAfter = writerStart.Add(time.Hour)
	b.write(t, withTopic("orders"), delayed, withTopic("billing"), withTopic("orders"))
	require.Equal(t, [][]string{{"orders", "billing"}}, b.notify.Calls())

	b.write(t, delayed)
	require.Len(t, b.notify.Calls(), 1, "no call without a due event")
}

// keyedEnvelope is a valid envelope of topic with the idempotency key key.
func keyedEnvelope(topic, key string) outbox.Envelope {
	e := withTopic(topic)
	e.IdempotencyKey = key
	return e
}

// Events skipped for a taken key are another write's: the hot path, its
// savepoint lookup and Notify hear only of those written, hot or cold, and
// the ids are the stored events'.
func TestWriterSkippedEventsAreNotHandedOver(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	b.hot.cold = map[string]bool{"payments": true}
	b.driver.mark = 3
	b.driver.keys = map[[2]string]string{{"orders", "taken"}: "stored-1", {"payments", "taken"}: "stored-2"}
	events := []outbox.Envelope{
		keyedEnvelope("orders", "taken"), keyedEnvelope("orders", "free"), keyedEnvelope("payments", "taken"),
		withTopic("payments"), keyedEnvelope("orders", "free"),
	}
	var res outbox.WriteResult
	require.NoError(t, b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) (err error) {
		res, err = b.writer.WriteDetailed(ctx, tx, events...)
		return err
	}))
	rows := b.insert(t).Rows
	require.Len(t, rows, 4, "the key repeated in the call is not sent to the driver")
	require.Equal(t, []string{"stored-1", res.IDs[1], "stored-2", res.IDs[3], res.IDs[1]}, res.IDs)
	require.Len(t, res.Skipped, 3)
	for i, want := range []outbox.SkippedEvent{
		{Index: 0, Topic: "orders", IdempotencyKey: "taken", ExistingID: "stored-1"},
		{Index: 2, Topic: "payments", IdempotencyKey: "taken", ExistingID: "stored-2"},
		{Index: 4, Topic: "orders", IdempotencyKey: "free", ExistingID: res.IDs[1]},
	} {
		got := res.Skipped[i]
		require.NotEmpty(t, got.ID)
		require.NotContains(t, []string{"stored-1", "stored-2", res.IDs[1]}, got.ID, "the id it would have had")
		got.ID = ""
		require.Equal(t, want, got)
	}

	kepts := b.driver.Kepts()
	require.Len(t, kepts, 1)
	require.Equal(t, []string{res.IDs[1]}, kepts[0].ids, "only the hot row written is looked up")
	require.Len(t, b.hot.Hot(), 1)
	require.Equal(t, []string{res.IDs[1]}, idsOf(b.hot.Hot()[0]))
	require.Equal(t, [][]string{{res.IDs[3]}}, committedIDs(b.hot.CommittedEvents()))
	require.Equal(t, [][]string{{"payments"}}, b.notify.Calls())

	// Write returns the same ids.
	ids := b.write(t, events[0])
	require.Equal(t, []string{"stored-1"}, ids)
}

// committedIDs returns the ids of each Committed call.
func committedIDs(calls [][]outbox.Envelope) [][]string {
	out := make([][]string, len(calls))
	for i, events := range calls {
		out[i] = idsOf(events)
	}
	return out
}

// A write whose every event is skipped hands nothing over.
func TestWriterAllSkipped(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	b.driver.mark = 3
	b.driver.keys = map[[2]string]string{{"orders", "taken"}: "stored-1"}
	require.Equal(t, []string{"stored-1"}, b.write(t, keyedEnvelope("orders", "taken")))
	require.Empty(t, b.driver.Kepts())
	b.requireNothingTold(t, "nothing written")
}

// With RejectDuplicateKeys a taken key fails the write with a
// DuplicateKeyError, and the driver is asked to write nothing of it; a
// key repeated within the call fails before any insert.
func TestWriterRejectsDuplicateKeys(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, func(cfg *outbox.WriterConfig) { cfg.RejectDuplicateKeys = true })
	b.driver.keys = map[[2]string]string{{"orders", "taken"}: "stored-1"}
	var err error
	require.NoError(t, b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		_, err = b.writer.Write(ctx, tx, keyedEnvelope("orders", "free"), keyedEnvelope("orders", "taken"))
		return nil
	}))
	require.ErrorIs(t, err, outbox.ErrDuplicateKey)
	var dup *outbox.DuplicateKeyError
	require.ErrorAs(t, err, &dup)
	require.Len(t, dup.Events, 1)
	require.Equal(t, 1, dup.Events[0].Index)
	require.Equal(t, "stored-1", dup.Events[0].ExistingID)
	require.EqualError(t, err, `outbox: duplicate idempotency key: envelope 1: key "taken" of topic orders is event stored-1's`)
	require.True(t, b.insert(t).RejectDuplicateKeys)
	require.NotContains(t, b.driver.keys, [2]string{"orders", "free"}, "the driver wrote nothing")
	b.requireNothingTold(t, "nothing written")

	require.NoError(t, b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		_, err = b.writer.Write(ctx, tx, keyedEnvelope("orders", "again"), withTopic("orders"), keyedEnvelope("orders", "again"))
		return nil
	}))
	require.ErrorAs(t, err, &dup)
	require.Len(t, dup.Events, 1)
	require.Equal(t, 2, dup.Events[0].Index)
	require.Len(t, b.driver.Inserts(), 1, "no insert for a key repeated in the call")
}
