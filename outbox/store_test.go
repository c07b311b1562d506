package outbox_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

var (
	storeNow = time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC)

	_ outbox.Inbox[*fakeTx] = (*outbox.Store[*fakeTx])(nil)
)

// storeBundle is a store on a fake driver, with a fake clock at storeNow.
type storeBundle struct {
	store  *outbox.Store[*fakeTx]
	driver *fakeDriver[*fakeTx]
	clock  *clocktest.Clock
}

// setupStore returns a store on a new fake driver; modify sets the
// driver's answers first.
func setupStore(t *testing.T, modify func(d *fakeDriver[*fakeTx])) *storeBundle {
	t.Helper()
	b := &storeBundle{driver: newDriver(), clock: clocktest.New(storeNow)}
	if modify != nil {
		modify(b.driver)
	}
	store, err := outbox.NewStore[*fakeTx](b.driver, outbox.StoreConfig{Clock: b.clock})
	require.NoError(t, err)
	b.store = store
	return b
}

func TestNewStore(t *testing.T) {
	t.Parallel()

	_, err := outbox.NewStore[*fakeTx](nil, outbox.StoreConfig{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	var none *fakeDriver[*fakeTx]
	_, err = outbox.NewStore[*fakeTx](none, outbox.StoreConfig{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest, "a typed nil is no driver either")

	d := newDriver()
	store, err := outbox.NewStore[*fakeTx](d, outbox.StoreConfig{})
	require.NoError(t, err)
	require.Same(t, d, store.Driver())
}

// A store without a clock stamps its writes with the system clock.
func TestStoreDefaultClock(t *testing.T) {
	t.Parallel()

	d := newDriver()
	store, err := outbox.NewStore[*fakeTx](d, outbox.StoreConfig{})
	require.NoError(t, err)
	before := time.Now()
	_, err = store.MarkProcessed(t.Context(), &fakeTx{}, "consumer", "id")
	require.NoError(t, err)
	require.WithinRange(t, d.marks[0].at, before, time.Now())
}

func TestStoreGet(t *testing.T) {
	t.Parallel()

	at := func(minutes int) time.Time { return storeNow.Add(time.Duration(minutes) * time.Minute) }
	full := outboxdriver.Row{
		ID: "e1", Type: "OrderCreated", Topic: "orders", AggregateType: "Order", AggregateID: "42", TenantID: "acme",
		Payload: []byte(`{"order":42}`), PayloadJSON: true, Headers: `{"trace":"abc"}`,
		Status: 3, Attempts: 4, OccurredAt: at(1), AvailableAt: at(2), CreatedAt: at(3), UpdatedAt: at(4), DoneAt: at(5),
		LastError: "broker down", LockedBy: "relay-1", LockedAt: at(6), LockedUntil: at(7),
	}
	malformed := errors.New("occurred_at is not a time")
	tests := []struct {
		name          string
		row           outboxdriver.Row
		want          outbox.Event
		wantMalformed error // the row's own, when not nil
		malformed     bool
	}{
		{
			name: "every field",
			row:  full,
			want: outbox.Event{
				Envelope: outbox.Envelope{ID: "e1", Type: "OrderCreated", Topic: "orders", OccurredAt: at(1), AggregateType: "Order",
					AggregateID: "42", TenantID: "acme", Headers: map[string]string{"trace": "abc"}, PayloadJSON: []byte(`{"order":42}`)},
				Status: outbox.StatusDead, Attempts: 4, AvailableAt: at(2), CreatedAt: at(3), UpdatedAt: at(4), DoneAt: at(5),
				LastError: "broker down", LockedBy: "relay-1", LockedAt: at(6), LockedUntil: at(7),
			},
		},
		{
			name: "bytes payload without headers",
			row:  outboxdriver.Row{ID: "e2", Type: "Blob", Topic: "Blob", AggregateType: "__GLOBAL__", Payload: []byte("raw")},
			want: outbox.Event{Envelope: outbox.Envelope{ID: "e2", Type: "Blob", Topic: "Blob", AggregateType: outbox.GlobalAggregate,
				PayloadBytes: []byte("raw")}},
		},
		{
			name: "nil payload is empty",
			row:  outboxdriver.Row{ID: "e3", Type: "Blob"},
			want: outbox.Event{Envelope: outbox.Envelope{ID: "e3", Type: "Blob", PayloadBytes: []byte{}}},
		},
		{
			name: "null headers",
			row:  outboxdriver.Row{ID: "e4", Type: "Blob", Payload: []byte{}, Headers: "null"},
			want: outbox.Event{Envelope: outbox.Envelope{ID: "e4", Type: "Blob", PayloadBytes: []byte{}}},
		},
		{name: "headers not an object", row: outboxdriver.Row{ID: "e5", Headers: `["trace"]`}, malformed: true},
		{name: "headers not strings", row: outboxdriver.Row{ID: "e6", Headers: `{"attempt":1}`}, malformed: true},
		{name: "headers not JSON", row: outboxdriver.Row{ID: "e7", Headers: `{"trace":`}, malformed: true},
		{
			name:          "malformed row",
			row:           outboxdriver.Row{ID: "e8", Headers: `{"trace":"abc"}`, Malformed: malformed},
			wantMalformed: malformed,
		},
		{
			name:          "the row's reason wins over the headers'",
			row:           outboxdriver.Row{ID: "e9", Headers: `[]`, Malformed: malformed},
			wantMalformed: malformed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setupStore(t, func(d *fakeDriver[*fakeTx]) { d.rows = map[string]outboxdriver.Row{tt.row.ID: tt.row} })
			got, err := b.store.Get(t.Context(), tt.row.ID)
			require.NoError(t, err)
			switch {
			case tt.wantMalformed != nil:
				require.Same(t, tt.wantMalformed, got.Malformed)
			case tt.malformed:
				require.Error(t, got.Malformed, "a row whose headers do not decode is returned, malformed")
				require.Nil(t, got.Headers)
			default:
				require.Equal(t, tt.want, got)
			}
			require.Equal(t, tt.row.ID, got.ID)
		})
	}
}

func TestStoreGetNotFound(t *testing.T) {
	t.Parallel()

	b := setupStore(t, nil)
	_, err := b.store.Get(t.Context(), "missing-id")
	require.ErrorIs(t, err, outbox.ErrNotFound)
	require.ErrorContains(t, err, "missing-id")

	b.driver.set(func(d *fakeDriver[*fakeTx]) { d.err = errors.New("connection reset") })
	_, err = b.store.Get(t.Context(), "missing-id")
	require.ErrorIs(t, err, b.driver.err)
	require.NotErrorIs(t, err, outbox.ErrNotFound)
}

func TestStoreQueryDead(t *testing.T) {
	t.Parallel()

	filter := outbox.DeadFilter{IDs: []string{"a"}, EventType: "T", Topic: "t", DiedBefore: time.Unix(100, 0)}
	tests := []struct {
		name      string
		in        outbox.DeadQuery
		wantLimit int // 0: invalid
	}{
		{name: "default limit", in: outbox.DeadQuery{}, wantLimit: 100},
		{name: "given values", in: outbox.DeadQuery{DeadFilter: filter, After: "x", Limit: 10}, wantLimit: 10},
		{name: "limit at maximum", in: outbox.DeadQuery{Limit: 10000}, wantLimit: 10000},
		{name: "limit over maximum", in: outbox.DeadQuery{Limit: 10001}},
		{name: "negative limit", in: outbox.DeadQuery{Limit: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setupStore(t, nil)
			_, err := b.store.QueryDead(t.Context(), tt.in)
			if tt.wantLimit == 0 {
				require.ErrorIs(t, err, outbox.ErrInvalidRequest)
				require.Empty(t, b.driver.Log(), "the driver is not called")
				return
			}
			require.NoError(t, err)
			want := outboxdriver.QueryDeadParams{
				Filter: outboxdriver.DeadFilter{IDs: tt.in.IDs, EventType: string(tt.in.EventType), Topic: tt.in.Topic, DiedBefore: tt.in.DiedBefore},
				After:  tt.in.After,
				Limit:  tt.wantLimit,
			}
			require.Equal(t, []outboxdriver.QueryDeadParams{want}, b.driver.queries)
		})
	}
}

func TestStoreQueryDeadReturnsEvents(t *testing.T) {
	t.Parallel()

	b := setupStore(t, func(d *fakeDriver[*fakeTx]) {
		d.dead = []outboxdriver.Row{
			{ID: "a", Type: "T", Status: 3, Payload: []byte("x"), LastError: "boom"},
			{ID: "b", Type: "T", Status: 3, Headers: "not JSON"},
		}
	})
	events, err := b.store.QueryDead(t.Context(), outbox.DeadQuery{})
	require.NoError(t, err)
	require.Len(t, events, 2)
	require.Equal(t, "a", events[0].ID)
	require.Equal(t, outbox.StatusDead, events[0].Status)
	require.Equal(t, "boom", events[0].LastError)
	require.Equal(t, []byte("x"), events[0].PayloadBytes)
	require.NoError(t, events[0].Malformed)
	require.Error(t, events[1].Malformed, "a malformed row is listed, not an error")

	b.driver.set(func(d *fakeDriver[*fakeTx]) { d.err = errors.New("connection reset") })
	_, err = b.store.QueryDead(t.Context(), outbox.DeadQuery{})
	require.ErrorIs(t, err, b.driver.err)
}

func TestStoreCountDeadAndBacklog(t *testing.T) {
	t.Parallel()

	oldest := storeNow.Add(-time.Hour)
	b := setupStore(t, func(d *fakeDriver[*fakeTx]) { d.count, d.oldest = 7, oldest })
	n, err := b.store.CountDead(t.Context(), outbox.DeadFilter{EventType: "T", Topic: "t"})
	require.NoError(t, err)
	require.EqualValues(t, 7, n)
	require.Equal(t, []outboxdriver.DeadFilter{{EventType: "T", Topic: "t"}}, b.driver.counted)
	n, err = b.store.CountDead(t.Context(), outbox.DeadFilter{})
	require.NoError(t, err, "counting every DEAD event is fine")
	require.EqualValues(t, 7, n)

	pending, got, err := b.store.Backlog(t.Context(), "orders")
	require.NoError(t, err)
	require.EqualValues(t, 7, pending)
	require.Equal(t, oldest, got)
	require.Equal(t, []string{"orders"}, b.driver.backlogs)
}

func TestStoreReplayDead(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		filter  outbox.DeadFilter
		wantErr bool
	}{
		{name: "zero filter", filter: outbox.DeadFilter{}, wantErr: true},
		{name: "empty ids", filter: outbox.DeadFilter{IDs: []string{}}},
		{name: "ids", filter: outbox.DeadFilter{IDs: []string{"a"}}},
		{name: "event type", filter: outbox.DeadFilter{EventType: "T"}},
		{name: "topic", filter: outbox.DeadFilter{Topic: "t"}},
		{name: "died before", filter: outbox.DeadFilter{DiedBefore: time.Unix(100, 0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setupStore(t, func(d *fakeDriver[*fakeTx]) { d.count = 3 })
			n, err := b.store.ReplayDead(t.Context(), tt.filter)
			if tt.wantErr {
				require.ErrorIs(t, err, outbox.ErrInvalidRequest)
				require.ErrorContains(t, err, "DiedBefore: time.Now()")
				require.Empty(t, b.driver.Log(), "the driver is not called")
				return
			}
			require.NoError(t, err)
			require.EqualValues(t, 3, n)
			f := tt.filter
			want := outboxdriver.ReplayDeadParams{
				Filter: outboxdriver.DeadFilter{IDs: f.IDs, EventType: string(f.EventType), Topic: f.Topic, DiedBefore: f.DiedBefore},
				Now:    storeNow,
			}
			require.Equal(t, []outboxdriver.ReplayDeadParams{want}, b.driver.replays)
			require.Equal(t, f.IDs == nil, b.driver.replays[0].Filter.IDs == nil, "an empty IDs stays non-nil: it matches none")
		})
	}
}

func TestStorePurgeValidation(t *testing.T) {
	t.Parallel()

	const day = 24 * time.Hour
	done, dead := int16(outbox.StatusDone), int16(outbox.StatusDead)
	tests := []struct {
		name string
		in   outbox.PurgeRequest
		want *outboxdriver.PurgeParams // nil: invalid
	}{
		{name: "retention required", in: outbox.PurgeRequest{}},
		{name: "negative retention", in: outbox.PurgeRequest{OlderThan: -day}},
		{name: "defaults", in: outbox.PurgeRequest{OlderThan: day},
			want: &outboxdriver.PurgeParams{Statuses: []int16{done, dead}, Before: storeNow.Add(-day), Limit: 1000}},
		{name: "given values", in: outbox.PurgeRequest{OlderThan: time.Nanosecond, BatchSize: 5, Statuses: []outbox.Status{outbox.StatusDead}},
			want: &outboxdriver.PurgeParams{Statuses: []int16{dead}, Before: storeNow.Add(-time.Nanosecond), Limit: 5}},
		{name: "done only", in: outbox.PurgeRequest{OlderThan: day, Statuses: []outbox.Status{outbox.StatusDone}},
			want: &outboxdriver.PurgeParams{Statuses: []int16{done}, Before: storeNow.Add(-day), Limit: 1000}},
		{name: "batch at maximum", in: outbox.PurgeRequest{OlderThan: day, BatchSize: 100000},
			want: &outboxdriver.PurgeParams{Statuses: []int16{done, dead}, Before: storeNow.Add(-day), Limit: 100000}},
		{name: "batch over maximum", in: outbox.PurgeRequest{OlderThan: day, BatchSize: 100001}},
		{name: "negative batch", in: outbox.PurgeRequest{OlderThan: day, BatchSize: -1}},
		{name: "NEW rows", in: outbox.PurgeRequest{OlderThan: day, Statuses: []outbox.Status{outbox.StatusNew}}},
		{name: "RETRY rows", in: outbox.PurgeRequest{OlderThan: day, Statuses: []outbox.Status{outbox.StatusDone, outbox.StatusRetry}}},
		{name: "unknown status", in: outbox.PurgeRequest{OlderThan: day, Statuses: []outbox.Status{outbox.Status(9)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setupStore(t, nil)
			_, err := b.store.Purge(t.Context(), tt.in)
			if tt.want == nil {
				require.ErrorIs(t, err, outbox.ErrInvalidRequest)
				require.Empty(t, b.driver.Log(), "the driver is not called")
				return
			}
			require.NoError(t, err)
			require.Equal(t, []outboxdriver.PurgeParams{*tt.want}, b.driver.purges)
		})
	}
}

// Both purges delete batch after batch until one comes back short, and on
// an error return what they deleted before it.
func TestStorePurgeBatches(t *testing.T) {
	t.Parallel()

	boom := errors.New("lock timeout")
	purges := map[string]struct {
		limit int
		purge func(b *storeBundle, t *testing.T) (int64, error)
	}{
		"events": {limit: 10, purge: func(b *storeBundle, t *testing.T) (int64, error) {
			return b.store.Purge(t.Context(), outbox.PurgeRequest{OlderThan: time.Hour, BatchSize: 10})
		}},
		"inbox": {limit: 1000, purge: func(b *storeBundle, t *testing.T) (int64, error) {
			return b.store.PurgeProcessed(t.Context(), time.Hour)
		}},
	}
	for name, purge := range purges {
		full := batchResult{n: int64(purge.limit)}
		tests := []struct {
			name    string
			batches []batchResult
			want    int64
			calls   int
			err     bool
		}{
			{name: "nothing to purge", batches: nil, want: 0, calls: 1},
			{name: "one short batch", batches: []batchResult{{n: 3}}, want: 3, calls: 1},
			{name: "full batches then a short one", batches: []batchResult{full, full, {n: 7}}, want: int64(2*purge.limit + 7), calls: 3},
			{name: "full batches then none", batches: []batchResult{full, full}, want: int64(2 * purge.limit), calls: 3},
			{name: "an error stops it", batches: []batchResult{full, {err: boom}, full}, want: int64(purge.limit), calls: 2, err: true},
			{name: "an error at once", batches: []batchResult{{err: boom}}, want: 0, calls: 1, err: true},
		}
		for _, tt := range tests {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()

				b := setupStore(t, func(d *fakeDriver[*fakeTx]) { d.batches = tt.batches })
				n, err := purge.purge(b, t)
				require.Equal(t, tt.want, n)
				require.Len(t, b.driver.purges, tt.calls)
				if tt.err {
					require.ErrorIs(t, err, boom)
					require.ErrorContains(t, err, fmt.Sprintf("after %d rows", tt.want))
					return
				}
				require.NoError(t, err)
			})
		}
	}
}

func TestStorePurgeProcessed(t *testing.T) {
	t.Parallel()

	for _, retention := range []time.Duration{0, -time.Hour} {
		b := setupStore(t, nil)
		_, err := b.store.PurgeProcessed(t.Context(), retention)
		require.ErrorIs(t, err, outbox.ErrInvalidRequest, "retention %s", retention)
		require.Empty(t, b.driver.Log(), "the driver is not called")
	}

	b := setupStore(t, nil)
	_, err := b.store.PurgeProcessed(t.Context(), 48*time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{"purge processed batch"}, b.driver.Log())
	require.Equal(t, []outboxdriver.PurgeParams{{Before: storeNow.Add(-48 * time.Hour), Limit: 1000}}, b.driver.purges)
}

func TestStoreMarkProcessed(t *testing.T) {
	t.Parallel()

	const twoByte = "é"
	tests := []struct {
		name         string
		consumer, id string
		valid        bool
	}{
		{name: "valid", consumer: "billing", id: "01J0000000000000000000000", valid: true},
		{name: "at the limits", consumer: strings.Repeat(twoByte, 128), id: strings.Repeat(twoByte, 255), valid: true},
		{name: "empty consumer", consumer: "", id: "e1"},
		{name: "empty id", consumer: "billing", id: ""},
		{name: "consumer too long", consumer: strings.Repeat("c", 129), id: "e1"},
		{name: "id too long", consumer: "billing", id: strings.Repeat("i", 256)},
		{name: "consumer not UTF-8", consumer: "bill\xff", id: "e1"},
		{name: "id not UTF-8", consumer: "billing", id: "e\xff"},
		{name: "NUL in consumer", consumer: "bill\x00ing", id: "e1"},
		{name: "NUL in id", consumer: "billing", id: "e\x001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setupStore(t, func(d *fakeDriver[*fakeTx]) { d.processed = true })
			tx := &fakeTx{id: 4}
			isNew, err := b.store.MarkProcessed(t.Context(), tx, tt.consumer, tt.id)
			if !tt.valid {
				require.ErrorIs(t, err, outbox.ErrInvalidRequest)
				require.False(t, isNew)
				require.Empty(t, b.driver.Log(), "the driver is not called")
				return
			}
			require.NoError(t, err)
			require.True(t, isNew)
			require.Equal(t, []markCall[*fakeTx]{{tx: tx, consumer: tt.consumer, id: tt.id, at: storeNow}}, b.driver.marks)
		})
	}
}

func TestStoreMarkProcessedAnswers(t *testing.T) {
	t.Parallel()

	b := setupStore(t, nil)
	_, err := b.store.MarkProcessed(t.Context(), nil, "billing", "e1")
	require.ErrorIs(t, err, outbox.ErrNoTransaction)
	require.Empty(t, b.driver.Log())

	isNew, err := b.store.MarkProcessed(t.Context(), &fakeTx{}, "billing", "e1")
	require.NoError(t, err)
	require.False(t, isNew, "the driver's answer: recorded already")

	b.clock.Advance(time.Minute)
	b.driver.set(func(d *fakeDriver[*fakeTx]) { d.err = errors.New("deadlock") })
	_, err = b.store.MarkProcessed(t.Context(), &fakeTx{}, "billing", "e1")
	require.ErrorIs(t, err, b.driver.err)
	require.Equal(t, storeNow.Add(time.Minute), b.driver.marks[1].at, "stamped by the store's clock")
}
