package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/syncbuf"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// fakeTx stands for a driver's transaction.
type fakeTx struct{ id int }

// txLog records, in order, what happens around a fake transaction: begin,
// commit and rollback, and whatever the test adds (fn, hooks).
type txLog struct {
	mu        sync.Mutex
	calls     []string
	tx        *fakeTx
	beginErr  error
	commitErr error
	// rollbackCtxErr is the error of the context Rollback was given.
	rollbackCtxErr error
}

func (l *txLog) add(call string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, call)
}

func (l *txLog) Calls() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls...)
}

func (l *txLog) funcs() outbox.TxFuncs[*fakeTx] {
	return outbox.TxFuncs[*fakeTx]{
		Begin: func(context.Context) (*fakeTx, error) {
			l.add("begin")
			if l.beginErr != nil {
				return nil, l.beginErr
			}
			l.tx = &fakeTx{id: 1}
			return l.tx, nil
		},
		Commit: func(_ context.Context, tx *fakeTx) error {
			if tx != l.tx {
				panic("commit of another transaction")
			}
			l.add("commit")
			return l.commitErr
		},
		Rollback: func(ctx context.Context, tx *fakeTx) error {
			if tx != l.tx {
				panic("rollback of another transaction")
			}
			l.add("rollback")
			l.rollbackCtxErr = ctx.Err()
			return nil
		},
	}
}

// hook returns an after-commit hook that records name.
func (l *txLog) hook(name string) func(context.Context) error {
	return func(context.Context) error {
		l.add(name)
		return nil
	}
}

// newTestLogger returns a logger writing text to the returned buffer.
func newTestLogger() (*slog.Logger, *syncbuf.Buffer) {
	buf := &syncbuf.Buffer{}
	return slog.New(slog.NewTextHandler(buf, nil)), buf
}

func TestRunInTxCommitRunsHooksInOrderOnce(t *testing.T) {
	t.Parallel()

	log := &txLog{}
	logger, logs := newTestLogger()
	err := outbox.RunInTx(t.Context(), log.funcs(), logger, func(ctx context.Context, tx *fakeTx) error {
		log.add("fn")
		for _, name := range []string{"hook 1", "hook 2", "hook 3"} {
			require.NoError(t, outbox.AfterCommit(ctx, log.hook(name)))
		}
		require.Equal(t, []string{"begin", "fn"}, log.Calls(), "hooks wait for the commit")
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"begin", "fn", "commit", "hook 1", "hook 2", "hook 3"}, log.Calls())
	require.Empty(t, logs.String())
}

func TestRunInTxWithoutHooks(t *testing.T) {
	t.Parallel()

	log := &txLog{}
	err := outbox.RunInTx(t.Context(), log.funcs(), nil, func(context.Context, *fakeTx) error { return nil })
	require.NoError(t, err)
	require.Equal(t, []string{"begin", "commit"}, log.Calls())
}

func TestRunInTxFnErrorRollsBack(t *testing.T) {
	t.Parallel()

	log := &txLog{}
	fnErr := errors.New("business rule violated")
	err := outbox.RunInTx(t.Context(), log.funcs(), nil, func(ctx context.Context, tx *fakeTx) error {
		require.NoError(t, outbox.AfterCommit(ctx, log.hook("hook")))
		return fnErr
	})
	require.Same(t, fnErr, err, "fn's error is returned as is")
	require.Equal(t, []string{"begin", "rollback"}, log.Calls())
}

func TestRunInTxRollbackIgnoresCancellation(t *testing.T) {
	t.Parallel()

	log := &txLog{}
	ctx, cancel := context.WithCancel(t.Context())
	err := outbox.RunInTx(ctx, log.funcs(), nil, func(ctx context.Context, tx *fakeTx) error {
		cancel()
		return ctx.Err()
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []string{"begin", "rollback"}, log.Calls())
	require.NoError(t, log.rollbackCtxErr, "the rollback runs even when the caller's context is done")
}

func TestRunInTxBeginError(t *testing.T) {
	t.Parallel()

	beginErr := errors.New("no connection")
	log := &txLog{beginErr: beginErr}
	called := false
	err := outbox.RunInTx(t.Context(), log.funcs(), nil, func(context.Context, *fakeTx) error {
		called = true
		return nil
	})
	require.ErrorIs(t, err, beginErr)
	require.False(t, called)
	require.Equal(t, []string{"begin"}, log.Calls())
}

func TestRunInTxCommitError(t *testing.T) {
	t.Parallel()

	commitErr := errors.New("serialization failure")
	log := &txLog{commitErr: commitErr}
	err := outbox.RunInTx(t.Context(), log.funcs(), nil, func(ctx context.Context, tx *fakeTx) error {
		require.NoError(t, outbox.AfterCommit(ctx, log.hook("hook")))
		return nil
	})
	require.ErrorIs(t, err, commitErr)
	require.NotSame(t, commitErr, err, "the commit error is wrapped")
	require.Contains(t, err.Error(), "commit")
	calls := log.Calls()
	require.Equal(t, []string{"begin", "commit"}, calls[:2])
	require.NotContains(t, calls, "hook", "no hook after a failed commit")
}

func TestRunInTxHookFailuresAreLogged(t *testing.T) {
	t.Parallel()

	log := &txLog{}
	logger, logs := newTestLogger()
	err := outbox.RunInTx(t.Context(), log.funcs(), logger, func(ctx context.Context, tx *fakeTx) error {
		require.NoError(t, outbox.AfterCommit(ctx, func(context.Context) error {
			log.add("hook 1")
			return errors.New("broker unreachable")
		}))
		require.NoError(t, outbox.AfterCommit(ctx, func(context.Context) error {
			log.add("hook 2")
			panic("hook exploded")
		}))
		require.NoError(t, outbox.AfterCommit(ctx, log.hook("hook 3")))
		return nil
	})
	require.NoError(t, err, "hook failures are not returned: the transaction committed")
	require.Equal(t, []string{"begin", "commit", "hook 1", "hook 2", "hook 3"}, log.Calls())

	out := logs.String()
	require.Contains(t, out, "after-commit hook failed")
	require.Contains(t, out, "broker unreachable")
	require.Contains(t, out, "hook exploded")
}

func TestRunInTxPanicRollsBack(t *testing.T) {
	t.Parallel()

	log := &txLog{}
	require.PanicsWithValue(t, "kaboom", func() {
		_ = outbox.RunInTx(t.Context(), log.funcs(), nil, func(ctx context.Context, tx *fakeTx) error {
			require.NoError(t, outbox.AfterCommit(ctx, log.hook("hook")))
			panic("kaboom")
		})
	})
	require.Equal(t, []string{"begin", "rollback"}, log.Calls())
}

func TestRunInTxConcurrentHookRegistration(t *testing.T) {
	t.Parallel()

	log := &txLog{}
	err := outbox.RunInTx(t.Context(), log.funcs(), nil, func(ctx context.Context, tx *fakeTx) error {
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() { _ = outbox.AfterCommit(ctx, log.hook(fmt.Sprint("hook ", i))) })
		}
		wg.Wait()
		return nil
	})
	require.NoError(t, err)
	require.Len(t, log.Calls(), 2+20)
}

func TestAfterCommitOutsideRunInTx(t *testing.T) {
	t.Parallel()

	noop := func(context.Context) error { return nil }
	require.ErrorIs(t, outbox.AfterCommit(t.Context(), noop), outbox.ErrNoCommitHooks)

	ctx := outbox.ContextWithTx(t.Context(), &fakeTx{})
	require.ErrorIs(t, outbox.AfterCommit(ctx, noop), outbox.ErrNoCommitHooks,
		"a transaction in the context is not enough: nobody would run the hook")
}

func TestTxFromContext(t *testing.T) {
	t.Parallel()

	t.Run("inside RunInTx", func(t *testing.T) {
		t.Parallel()

		log := &txLog{}
		err := outbox.RunInTx(t.Context(), log.funcs(), nil, func(ctx context.Context, tx *fakeTx) error {
			got, ok := outbox.TxFromContext[*fakeTx](ctx)
			require.True(t, ok)
			require.Same(t, tx, got)
			require.Same(t, log.tx, got)

			_, ok = outbox.TxFromContext[string](ctx)
			require.False(t, ok, "another transaction type is not found")
			return nil
		})
		require.NoError(t, err)
	})

	t.Run("empty context", func(t *testing.T) {
		t.Parallel()

		got, ok := outbox.TxFromContext[*fakeTx](t.Context())
		require.False(t, ok)
		require.Nil(t, got)
	})

	t.Run("ContextWithTx", func(t *testing.T) {
		t.Parallel()

		tx := &fakeTx{id: 7}
		ctx := outbox.ContextWithTx(t.Context(), tx)
		got, ok := outbox.TxFromContext[*fakeTx](ctx)
		require.True(t, ok)
		require.Same(t, tx, got)

		inner := &fakeTx{id: 8}
		got, ok = outbox.TxFromContext[*fakeTx](outbox.ContextWithTx(ctx, inner))
		require.True(t, ok)
		require.Same(t, inner, got, "the innermost transaction wins")
	})
}

// A savepoint commits nothing: the hooks registered in it run after the
// enclosing transaction commits, and not at all when it rolls back.
func TestRunInTxSavepointHooksWaitForTheEnclosingCommit(t *testing.T) {
	t.Parallel()

	for _, outerFails := range []bool{false, true} {
		outer, inner := &txLog{}, &txLog{}
		err := outbox.RunInTx(t.Context(), outer.funcs(), nil, func(ctx context.Context, tx *fakeTx) error {
			savepoint := inner.funcs()
			savepoint.Within = tx
			require.NoError(t, outbox.RunInTx(ctx, savepoint, nil, func(ctx context.Context, _ *fakeTx) error {
				return outbox.AfterCommit(ctx, outer.hook("savepoint hook"))
			}))
			require.Equal(t, []string{"begin", "commit"}, inner.Calls(), "released")
			require.Equal(t, []string{"begin"}, outer.Calls(), "the hook waits for the enclosing commit")
			if outerFails {
				return errors.New("business rule")
			}
			return nil
		})
		if outerFails {
			require.Error(t, err)
			require.Equal(t, []string{"begin", "rollback"}, outer.Calls())
		} else {
			require.NoError(t, err)
			require.Equal(t, []string{"begin", "commit", "savepoint hook"}, outer.Calls())
		}
	}
}

// A savepoint in a transaction whose commit no RunInTx reports (the
// caller's own) can take no hooks, even inside a RunInTx of another
// transaction.
func TestRunInTxSavepointOfAnUnreportedTransactionTakesNoHooks(t *testing.T) {
	t.Parallel()

	callers := &fakeTx{id: 7}
	inSavepoint := func(ctx context.Context) error {
		log := &txLog{}
		savepoint := log.funcs()
		savepoint.Within = callers
		return outbox.RunInTx(ctx, savepoint, nil, func(ctx context.Context, _ *fakeTx) error {
			return outbox.AfterCommit(ctx, log.hook("hook"))
		})
	}
	require.ErrorIs(t, inSavepoint(t.Context()), outbox.ErrNoCommitHooks)
	other := &txLog{}
	require.NoError(t, outbox.RunInTx(t.Context(), other.funcs(), nil, func(ctx context.Context, _ *fakeTx) error {
		require.ErrorIs(t, inSavepoint(ctx), outbox.ErrNoCommitHooks)
		return nil
	}))
}
