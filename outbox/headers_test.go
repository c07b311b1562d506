package outbox_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
)

type ctxKey struct{}

// stampHeaders is a HeaderInjector that copies a context value into a
// header, and remembers the events it saw.
type stampHeaders struct {
	mu   sync.Mutex
	seen []outbox.Envelope
}

func (s *stampHeaders) InjectHeaders(ctx context.Context, e *outbox.Envelope) {
	s.mu.Lock()
	s.seen = append(s.seen, *e)
	s.mu.Unlock()
	if v, ok := ctx.Value(ctxKey{}).(string); ok {
		if e.Headers == nil {
			e.Headers = map[string]string{}
		}
		e.Headers["traceparent"] = v
	}
}

// The writer's HeaderInjector adds headers from the context of Write to
// each event, after its id and topic are set and to its own copy: the
// rows and the hot path carry them, the caller's envelope does not.
func TestWriterHeaderInjector(t *testing.T) {
	t.Parallel()
	inject := &stampHeaders{}
	b := setupWriter(t, func(cfg *outbox.WriterConfig) { cfg.Headers = inject })
	mine := validEnvelope()
	mine.Headers = map[string]string{"traceparent": "old", "x-user": "kept"}
	var ids []string
	ctx := context.WithValue(t.Context(), ctxKey{}, "new")
	require.NoError(t, b.store.InTx(ctx, func(ctx context.Context, tx *fakeTx) (err error) {
		ids, err = b.writer.Write(ctx, tx, mine, withTopic("payments"))
		return err
	}))

	require.Len(t, inject.seen, 2)
	for i, e := range inject.seen {
		require.Equal(t, ids[i], e.ID, "the injector sees the event's id")
		require.NotEmpty(t, e.Topic)
	}
	rows := b.insert(t).Rows
	require.JSONEq(t, `{"traceparent":"new","x-user":"kept"}`, rows[0].Headers, "the injector's header replaces the caller's")
	require.JSONEq(t, `{"traceparent":"new"}`, rows[1].Headers)
	require.Equal(t, "new", b.hot.Hot()[0][0].Headers["traceparent"], "the hot path carries them")
	require.Equal(t, "old", mine.Headers["traceparent"], "the caller's envelope is left alone")

	// Nothing to add: no headers.
	b = setupWriter(t, func(cfg *outbox.WriterConfig) { cfg.Headers = &stampHeaders{} })
	b.write(t, validEnvelope())
	require.Empty(t, b.insert(t).Rows[0].Headers)
}

// A typed nil HeaderInjector is none.
func TestWriterTypedNilHeaderInjector(t *testing.T) {
	t.Parallel()
	var none *stampHeaders
	b := setupWriter(t, func(cfg *outbox.WriterConfig) { cfg.Headers = none })
	b.write(t, validEnvelope())
	require.Empty(t, b.insert(t).Rows[0].Headers)
}
