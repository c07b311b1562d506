package outbox_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// The BeforeWrite hooks run in order on the prepared events (ids, topics
// and DeliverIn resolved, the HeaderInjector's headers added) and may add
// headers, which the rows and the hot path carry; the caller's envelope
// keeps its own.
func TestWriterBeforeWriteHooksRunInOrder(t *testing.T) {
	t.Parallel()

	var calls []string
	b := setupWriter(t, func(cfg *outbox.WriterConfig) {
		cfg.Headers = &stampHeaders{}
		cfg.BeforeWrite = []func(context.Context, []outbox.Envelope) error{
			func(ctx context.Context, events []outbox.Envelope) error {
				calls = append(calls, "first")
				require.Len(t, events, 2)
				for i := range events {
					require.NotEmpty(t, events[i].ID, "the hooks see the prepared events")
					require.Equal(t, "OrderCreated", events[i].Topic)
					require.Equal(t, "trace-1", events[i].Headers["traceparent"], "after the HeaderInjector")
					events[i].Headers["tenant"] = "acme"
				}
				require.Equal(t, writerStart.Add(time.Minute), events[1].DeliverAfter)
				require.Zero(t, events[1].DeliverIn)
				return nil
			},
			func(ctx context.Context, events []outbox.Envelope) error {
				calls = append(calls, "second")
				require.Equal(t, "acme", events[0].Headers["tenant"], "the first hook's headers")
				events[0].Headers = map[string]string{"replaced": "yes"}
				return nil
			},
		}
	})
	given := validEnvelope()
	given.Headers = map[string]string{"given": "1"}
	delayed := validEnvelope()
	delayed.DeliverIn = time.Minute
	var ids []string
	require.NoError(t, b.store.InTx(context.WithValue(t.Context(), ctxKey{}, "trace-1"), func(ctx context.Context, tx *fakeTx) (err error) {
		ids, err = b.writer.Write(ctx, tx, given, delayed)
		return err
	}))
	require.Equal(t, []string{"first", "second"}, calls)
	require.Equal(t, map[string]string{"given": "1"}, given.Headers, "the caller's map is left alone")

	rows := b.insert(t).Rows
	require.Equal(t, ids, rowIDs(rows))
	require.JSONEq(t, `{"replaced":"yes"}`, rows[0].Headers)
	require.JSONEq(t, `{"traceparent":"trace-1","tenant":"acme"}`, rows[1].Headers)
	hot := b.hot.Hot()
	require.Len(t, hot, 1)
	require.Equal(t, map[string]string{"replaced": "yes"}, hot[0][0].Headers, "the hot path gets what was written")
}

type refusal struct{ reason string }

func (r *refusal) Error() string { return "refused: " + r.reason }

// A hook's error stops the hooks after it and the write: nothing is
// inserted, and Write returns the error wrapped.
func TestWriterBeforeWriteHookRefuses(t *testing.T) {
	t.Parallel()

	refused := &refusal{reason: "tenant suspended"}
	laterRan := false
	b := setupWriter(t, func(cfg *outbox.WriterConfig) {
		cfg.BeforeWrite = []func(context.Context, []outbox.Envelope) error{
			func(context.Context, []outbox.Envelope) error { return nil },
			func(context.Context, []outbox.Envelope) error { return refused },
			func(context.Context, []outbox.Envelope) error {
				laterRan = true
				return nil
			},
		}
	})
	ids, err := b.writer.Write(t.Context(), &fakeTx{}, validEnvelope())
	require.Nil(t, ids)
	require.ErrorIs(t, err, refused)
	var got *refusal
	require.ErrorAs(t, err, &got)
	require.EqualError(t, err, "outbox: before write: hook 1: refused: tenant suspended")
	require.False(t, laterRan, "the first error stops the hooks")
	require.Empty(t, b.driver.Log(), "nothing written")
}

// A hook may change only headers: any other change, or headers no longer
// valid, fail the write with a ValidationError naming the field.
func TestWriterBeforeWriteHookMayChangeOnlyHeaders(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		change func(e *outbox.Envelope)
		field  string // "" when the write goes through
	}{
		{"headers added", func(e *outbox.Envelope) { e.Headers = map[string]string{"a": "1"} }, ""},
		{"payload copied, same bytes", func(e *outbox.Envelope) { e.PayloadJSON = append([]byte(nil), e.PayloadJSON...) }, ""},
		{"id", func(e *outbox.Envelope) { e.ID = "other" }, "ID"},
		{"topic", func(e *outbox.Envelope) { e.Topic = "elsewhere" }, "Topic"},
		{"tenant", func(e *outbox.Envelope) { e.TenantID = "acme" }, "TenantID"},
		{"payload", func(e *outbox.Envelope) { e.PayloadJSON = []byte(`{"order":43}`) }, "PayloadJSON"},
		{"deliver after", func(e *outbox.Envelope) { e.DeliverAfter = writerStart.Add(time.Hour) }, "DeliverAfter"},
		{"deliver in", func(e *outbox.Envelope) { e.DeliverIn = time.Hour }, "DeliverIn"},
		{"empty header key", func(e *outbox.Envelope) { e.Headers = map[string]string{"": "x"} }, "Headers"},
		{"NUL in a header", func(e *outbox.Envelope) { e.Headers = map[string]string{"a": "\x00"} }, "Headers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setupWriter(t, func(cfg *outbox.WriterConfig) {
				cfg.BeforeWrite = []func(context.Context, []outbox.Envelope) error{func(_ context.Context, events []outbox.Envelope) error {
					tt.change(&events[1])
					return nil
				}}
			})
			_, err := b.writer.Write(t.Context(), &fakeTx{}, validEnvelope(), validEnvelope())
			if tt.field == "" {
				require.NoError(t, err)
				require.Len(t, b.driver.Inserts(), 1)
				return
			}
			var verr *outbox.ValidationError
			require.ErrorAs(t, err, &verr)
			require.ErrorIs(t, err, outbox.ErrInvalidEnvelope)
			require.Equal(t, 1, verr.Index)
			require.Equal(t, tt.field, verr.Field)
			require.Empty(t, b.driver.Log(), "nothing written")
		})
	}
}

// Headers a hook empties are written as none, as an empty map given to
// Write is.
func TestWriterBeforeWriteHookEmptiesHeaders(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, func(cfg *outbox.WriterConfig) {
		cfg.BeforeWrite = []func(context.Context, []outbox.Envelope) error{func(_ context.Context, events []outbox.Envelope) error {
			maps.DeleteFunc(events[0].Headers, func(string, string) bool { return true })
			return nil
		}}
	})
	e := validEnvelope()
	e.Headers = map[string]string{"secret": "x"}
	b.write(t, e)
	require.Empty(t, b.insert(t).Rows[0].Headers)
	require.Nil(t, b.hot.Hot()[0][0].Headers)
}

// A panicking hook panics Write, and with it the function of InTx, which
// rolls back.
func TestWriterBeforeWriteHookPanics(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, func(cfg *outbox.WriterConfig) {
		cfg.BeforeWrite = []func(context.Context, []outbox.Envelope) error{func(context.Context, []outbox.Envelope) error { panic("hook exploded") }}
	})
	require.PanicsWithValue(t, "hook exploded", func() {
		_ = b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
			_, err := b.writer.Write(ctx, tx, validEnvelope())
			return err
		})
	})
	require.Equal(t, []string{"begin", "rollback"}, b.driver.Log())
}

func TestNewWriterRefusesANilHook(t *testing.T) {
	t.Parallel()

	store, err := outbox.NewStore[*fakeTx](newDriver(), outbox.StoreConfig{})
	require.NoError(t, err)
	_, err = outbox.NewWriter(store, outbox.WriterConfig{BeforeWrite: []func(context.Context, []outbox.Envelope) error{nil}})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	require.ErrorContains(t, err, "BeforeWrite hook 0 is nil")
}

// A DeliverIn is resolved with the store's clock at the write: the row is
// due then, and never hot.
func TestWriterDeliverIn(t *testing.T) {
	t.Parallel()

	b := setupWriter(t, nil)
	b.clock.Advance(time.Hour)
	delayed := validEnvelope()
	delayed.DeliverIn = 90 * time.Second
	ids := b.write(t, delayed)
	rows := b.insert(t).Rows
	require.Equal(t, writerStart.Add(time.Hour+90*time.Second), rows[0].AvailableAt)
	require.False(t, rows[0].Claimed, "a delayed event is never hot")
	committed := b.hot.CommittedEvents()
	require.Len(t, committed, 1)
	require.Equal(t, ids, idsOf(committed[0]))
	require.Equal(t, rows[0].AvailableAt, committed[0][0].DeliverAfter)

	both := validEnvelope()
	both.DeliverIn, both.DeliverAfter = time.Minute, writerStart.Add(2*time.Hour)
	negative := validEnvelope()
	negative.DeliverIn = -time.Minute
	for _, e := range []outbox.Envelope{both, negative} {
		_, err := b.writer.Write(t.Context(), &fakeTx{}, e)
		var verr *outbox.ValidationError
		require.ErrorAs(t, err, &verr)
		require.Equal(t, "DeliverIn", verr.Field)
	}
	require.Len(t, b.driver.Inserts(), 1, "nothing more written")
}
