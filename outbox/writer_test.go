package outbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// insertCall is one call of fakeInserter.Insert: its hot and cold
// events, and all its events, hot then cold.
type insertCall struct {
	tx                *fakeTx
	hot, cold, events []outbox.Envelope
	lease             outbox.Lease
}

// fakeInserter records inserts and fails them with err when set. With
// inSavepoint set, it marks writes with hot events as made in savepoint 7;
// then Kept finds those not in gone, and fails with existingErr when set.
type fakeInserter struct {
	mu          sync.Mutex
	calls       []insertCall
	err         error
	inSavepoint bool
	gone        map[string]bool
	existingErr error
	lookups     []lookup
}

// lookup is one call of fakeInserter.Kept.
type lookup struct {
	tx        *fakeTx
	savepoint uint64
	ids       []string
}

func (f *fakeInserter) Insert(_ context.Context, tx *fakeTx, hot, cold []outbox.Envelope, lease outbox.Lease) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, insertCall{tx: tx, hot: hot, cold: cold, events: slices.Concat(hot, cold), lease: lease})
	if f.inSavepoint && len(hot) > 0 {
		return 7, f.err
	}
	return 0, f.err
}

func (f *fakeInserter) Kept(_ context.Context, tx *fakeTx, savepoint uint64, ids []string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups = append(f.lookups, lookup{tx: tx, savepoint: savepoint, ids: ids})
	if f.existingErr != nil {
		return nil, f.existingErr
	}
	var existing []string
	for _, id := range ids {
		if !f.gone[id] {
			existing = append(existing, id)
		}
	}
	return existing, nil
}

func (f *fakeInserter) Lookups() []lookup {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]lookup(nil), f.lookups...)
}

func (f *fakeInserter) Calls() []insertCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]insertCall(nil), f.calls...)
}

// hookRecorder is a writer's AfterCommit hook that records what it gets.
type hookRecorder struct {
	mu        sync.Mutex
	calls     [][]outbox.Envelope
	claimLeft []time.Duration
}

func (h *hookRecorder) hook(_ context.Context, events []outbox.Envelope, claimLeft time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, events)
	h.claimLeft = append(h.claimLeft, claimLeft)
	return nil
}

func (h *hookRecorder) ClaimLeft() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.claimLeft)
}

func (h *hookRecorder) Calls() [][]outbox.Envelope {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]outbox.Envelope(nil), h.calls...)
}

var writerStart = time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)

// writerBundle is a writer on a fake inserter, with a hook and a fake clock.
type writerBundle struct {
	writer   *outbox.Writer[*fakeTx]
	inserter *fakeInserter
	hook     *hookRecorder
	clock    *clocktest.Clock
	txLog    *txLog
}

// setupWriter returns a writer with an AfterCommit hook and claim owner
// "relay-1"; modify changes the config before the writer is built.
func setupWriter(t *testing.T, modify func(cfg *outbox.WriterConfig)) *writerBundle {
	t.Helper()

	b := &writerBundle{inserter: &fakeInserter{}, hook: &hookRecorder{}, clock: clocktest.New(writerStart), txLog: &txLog{}}
	cfg := outbox.WriterConfig{AfterCommit: b.hook.hook, ClaimOwner: "relay-1", Clock: b.clock}
	if modify != nil {
		modify(&cfg)
	}
	w, err := outbox.NewWriter[*fakeTx](b.inserter, cfg)
	require.NoError(t, err)
	b.writer = w
	return b
}

// inTx runs fn in a fake transaction through RunInTx.
func (b *writerBundle) inTx(t *testing.T, fn func(ctx context.Context, tx *fakeTx) error) error {
	t.Helper()
	return outbox.RunInTx(t.Context(), b.txLog.funcs(), nil, fn)
}

func TestNewWriter(t *testing.T) {
	t.Parallel()

	_, err := outbox.NewWriter[*fakeTx](nil, outbox.WriterConfig{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)

	var noStore *fakeInserter
	_, err = outbox.NewWriter[*fakeTx](noStore, outbox.WriterConfig{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest, "a typed nil is no store either")

	_, err = outbox.NewWriter[*fakeTx](&fakeInserter{}, outbox.WriterConfig{ClaimOwner: strings.Repeat("o", outbox.MaxOwnerLen+1)})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)

	_, err = outbox.NewWriter[*fakeTx](&fakeInserter{}, outbox.WriterConfig{ClaimOwner: "bad\x00owner"})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)

	w, err := outbox.NewWriter[*fakeTx](&fakeInserter{}, outbox.WriterConfig{})
	require.NoError(t, err)
	require.NotNil(t, w)
}

func TestWriterNilTx(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	ids, err := b.writer.Write(t.Context(), nil, validEnvelope())
	require.ErrorIs(t, err, outbox.ErrNoTransaction)
	require.Nil(t, ids)

	_, err = b.writer.Write(t.Context(), nil)
	require.ErrorIs(t, err, outbox.ErrNoTransaction, "even with no events")
	require.Empty(t, b.inserter.Calls())
}

// countingInserter counts inserts, for any transaction type.
type countingInserter[Tx any] struct{ n atomic.Int32 }

func (c *countingInserter[Tx]) Insert(context.Context, Tx, []outbox.Envelope, []outbox.Envelope, outbox.Lease) (uint64, error) {
	c.n.Add(1)
	return 0, nil
}

func (c *countingInserter[Tx]) Kept(_ context.Context, _ Tx, _ uint64, ids []string) ([]string, error) {
	return ids, nil
}

// committer is an interface transaction type, as pgx.Tx is.
type committer interface{ Commit(context.Context) error }

type fakeCommitter struct{}

func (*fakeCommitter) Commit(context.Context) error { return nil }

func TestWriterNilTxOfOtherTypes(t *testing.T) {
	t.Parallel()

	t.Run("interface", func(t *testing.T) {
		t.Parallel()

		ins := &countingInserter[committer]{}
		w, err := outbox.NewWriter[committer](ins, outbox.WriterConfig{})
		require.NoError(t, err)

		_, err = w.Write(t.Context(), nil, validEnvelope())
		require.ErrorIs(t, err, outbox.ErrNoTransaction)
		var typedNil *fakeCommitter
		_, err = w.Write(t.Context(), typedNil, validEnvelope())
		require.ErrorIs(t, err, outbox.ErrNoTransaction, "a nil pointer in the interface")
		require.Zero(t, ins.n.Load())

		_, err = w.Write(t.Context(), &fakeCommitter{}, validEnvelope())
		require.NoError(t, err)
		require.Equal(t, int32(1), ins.n.Load())
	})

	t.Run("value type", func(t *testing.T) {
		t.Parallel()

		type handle struct{ n int }
		ins := &countingInserter[handle]{}
		w, err := outbox.NewWriter[handle](ins, outbox.WriterConfig{})
		require.NoError(t, err)
		_, err = w.Write(t.Context(), handle{}, validEnvelope())
		require.NoError(t, err, "a zero struct is a transaction handle, not a missing one")
		require.Equal(t, int32(1), ins.n.Load())
	})

	t.Run("nil inserter", func(t *testing.T) {
		t.Parallel()

		w, err := outbox.NewWriter[committer](outbox.Inserter[committer](nil), outbox.WriterConfig{})
		require.ErrorIs(t, err, outbox.ErrInvalidRequest)
		require.Nil(t, w)
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
	require.Equal(t, "Payload", verr.Field)
	require.Nil(t, ids)
	require.Empty(t, b.inserter.Calls(), "nothing of the batch is written")
}

func TestWriterNoEvents(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	err := b.inTx(t, func(ctx context.Context, tx *fakeTx) error {
		ids, err := b.writer.Write(ctx, tx)
		require.NoError(t, err)
		require.Empty(t, ids)
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, b.inserter.Calls())
	require.Empty(t, b.hook.Calls())
}

func TestWriterWrite(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, func(cfg *outbox.WriterConfig) { cfg.AfterCommit = nil })
	tx := &fakeTx{id: 3}
	given := validEnvelope()
	given.ID = "my-own-id"
	ids, err := b.writer.Write(t.Context(), tx, validEnvelope(), given, validEnvelope())
	require.NoError(t, err)
	require.Len(t, ids, 3)
	require.Equal(t, "my-own-id", ids[1])
	require.Less(t, ids[0], ids[2])

	calls := b.inserter.Calls()
	require.Len(t, calls, 1, "one insert for the batch")
	require.Same(t, tx, calls[0].tx)
	require.Zero(t, calls[0].lease, "no hot path, no claim")
	require.Len(t, calls[0].events, 3)
	for i, e := range calls[0].events {
		require.Equal(t, ids[i], e.ID, "ids are returned in order")
		require.Equal(t, writerStart, e.OccurredAt, "the writer's clock stamps OccurredAt")
		require.Equal(t, "OrderCreated", e.Topic)
		require.Equal(t, outbox.GlobalAggregate, e.AggregateType)
	}
}

func TestWriterInserterError(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	insertErr := errors.New("connection reset")
	b.inserter.err = insertErr

	err := b.inTx(t, func(ctx context.Context, tx *fakeTx) error {
		ids, err := b.writer.Write(ctx, tx, validEnvelope())
		require.ErrorIs(t, err, insertErr)
		require.NotSame(t, insertErr, err)
		require.Nil(t, ids)

		b.inserter.mu.Lock()
		b.inserter.err = outbox.ErrDuplicateEvent
		b.inserter.mu.Unlock()
		_, err = b.writer.Write(ctx, tx, validEnvelope())
		require.ErrorIs(t, err, outbox.ErrDuplicateEvent)
		return nil // commit anyway
	})
	require.NoError(t, err)
	require.Empty(t, b.hook.Calls(), "a failed write hands nothing to the hot path")
}

func TestWriterHookOnlyAfterCommit(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	var ids []string
	err := b.inTx(t, func(ctx context.Context, tx *fakeTx) error {
		var err error
		ids, err = b.writer.Write(ctx, tx, validEnvelope(), validEnvelope())
		require.NoError(t, err)
		require.Empty(t, b.hook.Calls(), "not before the commit")
		return nil
	})
	require.NoError(t, err)

	calls := b.hook.Calls()
	require.Len(t, calls, 1)
	require.Len(t, calls[0], 2)
	for i, e := range calls[0] {
		require.Equal(t, ids[i], e.ID)
		require.Equal(t, "OrderCreated", e.Topic, "the hook gets prepared envelopes")
	}
	require.Equal(t, []string{"begin", "commit"}, b.txLog.Calls())
}

// The hook learns how much of the events' claim is left at the commit:
// the claim began before the insert, and a transaction that stays open
// spends it. Events written unclaimed have none.
func TestWriterHookGetsWhatIsLeftOfTheClaim(t *testing.T) {
	t.Parallel()

	for name, tt := range map[string]struct {
		owner string
		want  time.Duration
	}{
		"claimed":   {owner: "relay-1", want: outbox.DefaultLockTimeout - 3*time.Minute},
		"unclaimed": {owner: "", want: 0},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupWriter(t, func(cfg *outbox.WriterConfig) { cfg.ClaimOwner = tt.owner })
			require.NoError(t, b.inTx(t, func(ctx context.Context, tx *fakeTx) error {
				_, err := b.writer.Write(ctx, tx, validEnvelope())
				b.clock.Advance(3 * time.Minute) // the transaction stays open
				return err
			}))
			require.Equal(t, []time.Duration{tt.want}, b.hook.ClaimLeft())
		})
	}
}

func TestWriterHookNotAfterRollback(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	rollback := errors.New("rollback please")
	err := b.inTx(t, func(ctx context.Context, tx *fakeTx) error {
		_, err := b.writer.Write(ctx, tx, validEnvelope())
		require.NoError(t, err)
		return rollback
	})
	require.ErrorIs(t, err, rollback)
	require.Len(t, b.inserter.Calls(), 1)
	require.Empty(t, b.hook.Calls())
}

func TestWriterHookNotOutsideRunInTx(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	tx := &fakeTx{}
	ctx := outbox.ContextWithTx(t.Context(), tx)
	_, err := b.writer.Write(ctx, tx, validEnvelope())
	require.NoError(t, err)
	require.Empty(t, b.hook.Calls(), "a caller-owned transaction leaves delivery to the poller")
	require.Zero(t, b.inserter.Calls()[0].lease)
}

func TestWriterHookPerWrite(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	var first, second []string
	err := b.inTx(t, func(ctx context.Context, tx *fakeTx) error {
		var err error
		first, err = b.writer.Write(ctx, tx, validEnvelope())
		require.NoError(t, err)
		second, err = b.writer.Write(ctx, tx, validEnvelope(), validEnvelope())
		require.NoError(t, err)
		return nil
	})
	require.NoError(t, err)
	calls := b.hook.Calls()
	require.Len(t, calls, 2, "one hook call per write, in write order")
	require.Equal(t, first[0], calls[0][0].ID)
	require.Equal(t, second[0], calls[1][0].ID)
	require.Equal(t, second[1], calls[1][1].ID)
}

func TestWriterHookGetsCopies(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	headers := map[string]string{"trace": "abc"}
	jsonPayload := []byte(`{"order":42}`)
	bytesPayload := []byte("raw")
	events := []outbox.Envelope{
		{Type: "OrderCreated", Headers: headers, PayloadJSON: jsonPayload},
		{Type: "Blob", PayloadBytes: bytesPayload},
	}
	err := b.inTx(t, func(ctx context.Context, tx *fakeTx) error {
		_, err := b.writer.Write(ctx, tx, events...)
		require.NoError(t, err)

		// The caller reuses its data before the commit.
		headers["trace"] = "changed"
		headers["new"] = "x"
		copy(jsonPayload, `{"order":99}`)
		bytesPayload[0] = 'X'
		events[0].Topic = "changed"
		return nil
	})
	require.NoError(t, err)

	calls := b.hook.Calls()
	require.Len(t, calls, 1)
	got := calls[0]
	require.Equal(t, map[string]string{"trace": "abc"}, got[0].Headers)
	require.Equal(t, `{"order":42}`, string(got[0].PayloadJSON))
	require.Equal(t, "OrderCreated", got[0].Topic)
	require.Equal(t, "raw", string(got[1].PayloadBytes))

	inserted := b.inserter.Calls()[0].events
	require.Equal(t, map[string]string{"trace": "abc"}, inserted[0].Headers)
	require.Equal(t, `{"order":42}`, string(inserted[0].PayloadJSON))
	require.Equal(t, "raw", string(inserted[1].PayloadBytes))
}

func TestWriterHookSkipsDelayedEvents(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	delayed := validEnvelope()
	delayed.DeliverAfter = writerStart.Add(time.Hour)
	var ids []string
	err := b.inTx(t, func(ctx context.Context, tx *fakeTx) error {
		var err error
		ids, err = b.writer.Write(ctx, tx, validEnvelope(), delayed, validEnvelope())
		require.NoError(t, err)
		return nil
	})
	require.NoError(t, err)

	inserts := b.inserter.Calls()
	require.Len(t, inserts, 1, "hot and cold events are one write")
	require.Len(t, inserts[0].events, 3, "delayed events are written")
	require.Equal(t, []string{ids[0], ids[2]}, []string{inserts[0].hot[0].ID, inserts[0].hot[1].ID})
	calls := b.hook.Calls()
	require.Len(t, calls, 1)
	require.Len(t, calls[0], 2, "but never delivered on the hot path")
	require.Equal(t, ids[0], calls[0][0].ID)
	require.Equal(t, ids[2], calls[0][1].ID)
}

func TestWriterClaimedBy(t *testing.T) {
	t.Parallel()

	now := validEnvelope()
	later := validEnvelope()
	later.DeliverAfter = writerStart.Add(time.Minute)

	tests := []struct {
		name      string
		noHook    bool
		owner     string
		inRunInTx bool
		topicOff  bool
		events    []outbox.Envelope
		claimed   int // how many of the events are written claimed by relay-1
		wantHook  bool
	}{
		{name: "hot path", owner: "relay-1", inRunInTx: true, events: []outbox.Envelope{now}, claimed: 1, wantHook: true},
		{
			name: "hot path with some delayed events", owner: "relay-1", inRunInTx: true, events: []outbox.Envelope{later, now},
			claimed: 1, wantHook: true,
		},
		{name: "only delayed events", owner: "relay-1", inRunInTx: true, events: []outbox.Envelope{later, later}},
		{name: "topic the hot path does not take", owner: "relay-1", inRunInTx: true, topicOff: true, events: []outbox.Envelope{now}},
		{name: "no hook", noHook: true, owner: "relay-1", inRunInTx: true, events: []outbox.Envelope{now}},
		{name: "caller-owned transaction", owner: "relay-1", events: []outbox.Envelope{now}},
		{name: "no owner", inRunInTx: true, events: []outbox.Envelope{now}, wantHook: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setupWriter(t, func(cfg *outbox.WriterConfig) {
				cfg.ClaimOwner = tt.owner
				cfg.HotTopic = func(string) bool { return !tt.topicOff }
				if tt.noHook {
					cfg.AfterCommit = nil
				}
			})
			write := func(ctx context.Context, tx *fakeTx) error {
				_, err := b.writer.Write(ctx, tx, tt.events...)
				return err
			}
			if tt.inRunInTx {
				require.NoError(t, b.inTx(t, write))
			} else {
				require.NoError(t, write(t.Context(), &fakeTx{}))
			}

			calls := b.inserter.Calls()
			require.Len(t, calls, 1, "one insert for the batch")
			claimed := 0
			for _, isClaimed := range outbox.InsertRows(calls[0].hot, calls[0].cold, calls[0].lease) {
				if isClaimed {
					claimed++
					require.Equal(t, "relay-1", calls[0].lease.Owner)
				}
			}
			require.Equal(t, tt.claimed, claimed)
			if tt.wantHook {
				require.Len(t, b.hook.Calls(), 1)
			} else {
				require.Empty(t, b.hook.Calls())
			}
		})
	}
}

func TestWriterConcurrentWrites(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	err := b.inTx(t, func(ctx context.Context, tx *fakeTx) error {
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				_, err := b.writer.Write(ctx, tx, validEnvelope())
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		return nil
	})
	require.NoError(t, err)
	require.Len(t, b.inserter.Calls(), 20)
	require.Len(t, b.hook.Calls(), 20)

	seen := make(map[string]bool)
	for _, c := range b.hook.Calls() {
		require.False(t, seen[c[0].ID], "ids are unique")
		seen[c[0].ID] = true
	}
}

func TestWriterHookOnlyForTheCommittedTx(t *testing.T) {
	t.Parallel()
	b := setupWriter(t, nil)
	err := b.inTx(t, func(ctx context.Context, tx *fakeTx) error {
		savepoint := &fakeTx{id: 2} // a nested transaction that will roll back
		_, err := b.writer.Write(ctx, savepoint, validEnvelope())
		require.NoError(t, err)
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, b.hook.Calls(), "events of another transaction are not the InTx commit's to deliver")
	require.Zero(t, b.inserter.Calls()[0].lease)
}

// Rows in the top-level transaction commit with it: the writer asks the
// store nothing more.
func TestWriterLooksUpNothingWrittenInTheTopLevelTransaction(t *testing.T) {
	t.Parallel()
	b := setupWriter(t, nil)
	require.NoError(t, b.inTx(t, func(ctx context.Context, tx *fakeTx) error {
		_, err := b.writer.Write(ctx, tx, validEnvelope(), validEnvelope())
		return err
	}))
	require.Len(t, b.hook.Calls(), 1)
	require.Empty(t, b.inserter.Lookups())
}

// Rows in a savepoint, one the writer's transaction is or one opened on
// it, can roll back while the transaction commits: the hot path takes
// those the top-level transaction still sees just before it commits.
func TestWriterHandsOverOnlyWhatSavepointsKept(t *testing.T) {
	t.Parallel()
	b := setupWriter(t, nil)
	b.inserter.inSavepoint = true
	first, second := validEnvelope(), validEnvelope()
	first.ID, second.ID = "rolled back", "kept"
	b.inserter.gone = map[string]bool{first.ID: true}
	inner := &txLog{}
	require.NoError(t, b.inTx(t, func(ctx context.Context, tx *fakeTx) error {
		savepoint := inner.funcs()
		savepoint.Within = tx
		return outbox.RunInTx(ctx, savepoint, nil, func(ctx context.Context, tx *fakeTx) error {
			_, err := b.writer.Write(ctx, tx, first, second)
			return err
		})
	}))
	lookups := b.inserter.Lookups()
	require.Len(t, lookups, 1)
	require.Same(t, b.txLog.tx, lookups[0].tx, "looked up in the top-level transaction, the savepoint being over")
	require.Equal(t, []string{"rolled back", "kept"}, lookups[0].ids)
	require.EqualValues(t, 7, lookups[0].savepoint, "asked about the write's savepoint")
	require.Len(t, b.hook.Calls(), 1)
	require.Equal(t, []string{"kept"}, ids(b.hook.Calls()[0]))
	require.Equal(t, []string{"begin", "commit"}, b.txLog.Calls())

	b.inserter.gone[second.ID] = true
	require.NoError(t, b.inTx(t, func(ctx context.Context, tx *fakeTx) error {
		_, err := b.writer.Write(ctx, tx, first, second)
		return err
	}))
	require.Len(t, b.hook.Calls(), 1, "nothing left to hand over, no call")
	require.Len(t, b.inserter.Lookups(), 2)

	rolledBack := errors.New("savepoint rolled back")
	require.NoError(t, b.inTx(t, func(ctx context.Context, tx *fakeTx) error {
		savepoint := inner.funcs()
		savepoint.Within = tx
		err := outbox.RunInTx(ctx, savepoint, nil, func(ctx context.Context, tx *fakeTx) error {
			_, err := b.writer.Write(ctx, tx, validEnvelope())
			require.NoError(t, err)
			return rolledBack
		})
		require.ErrorIs(t, err, rolledBack)
		return nil
	}))
	require.Len(t, b.inserter.Lookups(), 2, "nothing to look up for a savepoint rolled back")
}

// A lookup that fails leaves the transaction uncommitted: committed, its
// hot rows would stay claimed for the whole lease.
func TestWriterLookupFailureRollsBack(t *testing.T) {
	t.Parallel()
	b := setupWriter(t, nil)
	b.inserter.inSavepoint = true
	b.inserter.existingErr = errors.New("connection lost")
	err := b.inTx(t, func(ctx context.Context, tx *fakeTx) error {
		_, err := b.writer.Write(ctx, tx, validEnvelope())
		return err
	})
	require.ErrorIs(t, err, b.inserter.existingErr)
	require.Equal(t, []string{"begin", "rollback"}, b.txLog.Calls())
	require.Empty(t, b.hook.Calls())
}

// ids returns the ids of events.
func ids(events []outbox.Envelope) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}

// committedRecorder is a writer's Committed hook that records what it gets.
type committedRecorder struct {
	mu     sync.Mutex
	calls  [][]string // the topics of each call
	events int
}

func (c *committedRecorder) hook(events []outbox.Envelope) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, outbox.Topics(events))
	c.events += len(events)
}

func (c *committedRecorder) Calls() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]string(nil), c.calls...)
}

func (c *committedRecorder) Events() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events
}

func TestWriterTellsDueAndDelayedEventsAfterCommitOnly(t *testing.T) {
	t.Parallel()

	committed, scheduled := &committedRecorder{}, &committedRecorder{}
	b := setupWriter(t, func(cfg *outbox.WriterConfig) {
		cfg.HotTopic = func(topic string) bool { return topic == "served-here" }
		cfg.Committed = committed.hook
		cfg.Scheduled = scheduled.hook
	})
	withTopic := func(topic string) outbox.Envelope {
		e := validEnvelope()
		e.Topic = topic
		return e
	}
	delayed := withTopic("later")
	delayed.DeliverAfter = writerStart.Add(time.Hour)
	write := func(ctx context.Context, tx *fakeTx) error {
		_, err := b.writer.Write(ctx, tx, withTopic("served-here"), withTopic("billing"), withTopic("billing"),
			withTopic("shipping"), delayed)
		return err
	}

	require.NoError(t, b.inTx(t, func(ctx context.Context, tx *fakeTx) error {
		require.NoError(t, write(ctx, tx))
		require.Empty(t, committed.Calls(), "nothing before the commit")
		return nil
	}))
	require.Equal(t, [][]string{{"billing", "shipping"}}, committed.Calls(),
		"hot-path and delayed events are not announced")
	require.Equal(t, 3, committed.Events(), "every due event, two of one topic")
	require.Equal(t, [][]string{{"later"}}, scheduled.Calls(), "the delayed event is scheduled")

	rollback := errors.New("rollback please")
	require.ErrorIs(t, b.inTx(t, func(ctx context.Context, tx *fakeTx) error {
		require.NoError(t, write(ctx, tx))
		return rollback
	}), rollback)
	tx := &fakeTx{}
	require.NoError(t, write(outbox.ContextWithTx(t.Context(), tx), tx))
	require.Len(t, committed.Calls(), 1, "not after a rollback, nor for a transaction whose commit nobody reports")
	require.Len(t, scheduled.Calls(), 1, "nor scheduled then")
}
