package sqlite

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestGateWaitEndsWithErrBusyOrTheContext(t *testing.T) {
	t.Parallel()
	g := &gate{slot: make(chan struct{}, 1), wait: 20 * time.Millisecond}
	require.NoError(t, g.enter(t.Context(), "holder"))
	err := g.enter(t.Context(), "claim")
	require.ErrorIs(t, err, ErrBusy)
	require.ErrorContains(t, err, "sqlite: claim:")

	g.wait = time.Minute
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, g.enter(ctx, "claim"), context.Canceled)
	g.leave()
	require.NoError(t, g.enter(ctx, "free"), "a free gate is entered whatever the context")
	g.leave()
}

func TestGateOfIsOnePerDatabase(t *testing.T) {
	t.Parallel()
	a, err := sql.Open(DriverName, "file:/gate-a?vfs=memdb")
	require.NoError(t, err)
	defer a.Close()
	b, err := sql.Open(DriverName, "file:/gate-b?vfs=memdb")
	require.NoError(t, err)
	defer b.Close()
	first := gateOf(a)
	require.Same(t, first, gateOf(a), "a gate per database, not per call")
	require.NotSame(t, gateOf(a), gateOf(b))
}
