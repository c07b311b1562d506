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

// txBundle is a store on a fake driver, logging to logs.
type txBundle struct {
	driver *fakeDriver[*fakeTx]
	store  *outbox.Store[*fakeTx]
	logs   *syncbuf.Buffer
}

// setupTx returns a store on a new fake driver; modify sets the driver's
// answers before the store is built.
func setupTx(t *testing.T, modify func(d *fakeDriver[*fakeTx])) *txBundle {
	t.Helper()
	b := &txBundle{driver: newDriver(), logs: &syncbuf.Buffer{}}
	if modify != nil {
		modify(b.driver)
	}
	store, err := outbox.NewStore[*fakeTx](b.driver, outbox.StoreConfig{Logger: slog.New(slog.NewTextHandler(b.logs, nil))})
	require.NoError(t, err)
	b.store = store
	return b
}

// savepointStore returns a store whose transactions are savepoints in the
// one the outer store's driver began last, as a PostgreSQL store on a
// pgx.Tx is: its driver's Outer returns that transaction.
func (b *txBundle) savepointStore(t *testing.T) *txBundle {
	t.Helper()
	b.driver.mu.Lock()
	outer := b.driver.tx
	b.driver.mu.Unlock()
	require.NotNil(t, outer, "the outer transaction has begun")
	return setupTx(t, func(d *fakeDriver[*fakeTx]) { d.outer = outer })
}

func TestInTxCommitRunsHooksInOrderOnce(t *testing.T) {
	t.Parallel()

	b := setupTx(t, nil)
	err := b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		b.driver.add("fn")
		for _, name := range []string{"hook 1", "hook 2", "hook 3"} {
			require.NoError(t, outbox.AfterCommit(ctx, b.driver.hook(name)))
		}
		require.Equal(t, []string{"begin", "fn"}, b.driver.Log(), "hooks wait for the commit")
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"begin", "fn", "commit", "hook 1", "hook 2", "hook 3"}, b.driver.Log())
	require.Empty(t, b.logs.String())
}

func TestInTxWithoutHooks(t *testing.T) {
	t.Parallel()

	b := setupTx(t, nil)
	require.NoError(t, b.store.InTx(t.Context(), func(context.Context, *fakeTx) error { return nil }))
	require.Equal(t, []string{"begin", "commit"}, b.driver.Log())
}

func TestInTxFnErrorRollsBack(t *testing.T) {
	t.Parallel()

	b := setupTx(t, nil)
	fnErr := errors.New("business rule violated")
	err := b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		require.NoError(t, outbox.AfterCommit(ctx, b.driver.hook("hook")))
		return fnErr
	})
	require.Same(t, fnErr, err, "fn's error is returned as is")
	require.Equal(t, []string{"begin", "rollback"}, b.driver.Log())
}

func TestInTxRollbackIgnoresCancellation(t *testing.T) {
	t.Parallel()

	b := setupTx(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	err := b.store.InTx(ctx, func(ctx context.Context, tx *fakeTx) error {
		cancel()
		return ctx.Err()
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []string{"begin", "rollback"}, b.driver.Log())
	require.NoError(t, b.driver.rollbackCtxErr, "the rollback runs even when the caller's context is done")
}

// A context that ends while fn runs fails the transaction even when fn
// does not notice: it is rolled back rather than committed, and InTx
// returns the context's cause.
func TestInTxContextEndedBeforeCommitRollsBack(t *testing.T) {
	t.Parallel()

	b := setupTx(t, nil)
	cause := errors.New("request abandoned")
	ctx, cancel := context.WithCancelCause(t.Context())
	err := b.store.InTx(ctx, func(ctx context.Context, tx *fakeTx) error {
		require.NoError(t, outbox.AfterCommit(ctx, b.driver.hook("hook")))
		cancel(cause)
		return nil
	})
	require.ErrorIs(t, err, cause)
	require.ErrorContains(t, err, "commit")
	require.Equal(t, []string{"begin", "rollback"}, b.driver.Log())
}

func TestInTxBeginError(t *testing.T) {
	t.Parallel()

	beginErr := errors.New("no connection")
	b := setupTx(t, func(d *fakeDriver[*fakeTx]) { d.beginErr = beginErr })
	called := false
	err := b.store.InTx(t.Context(), func(context.Context, *fakeTx) error {
		called = true
		return nil
	})
	require.ErrorIs(t, err, beginErr)
	require.ErrorContains(t, err, "begin")
	require.False(t, called)
	require.Equal(t, []string{"begin"}, b.driver.Log())
}

func TestInTxCommitError(t *testing.T) {
	t.Parallel()

	commitErr := errors.New("serialization failure")
	b := setupTx(t, func(d *fakeDriver[*fakeTx]) { d.commitErr = commitErr })
	err := b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		require.NoError(t, outbox.AfterCommit(ctx, b.driver.hook("hook")))
		return nil
	})
	require.ErrorIs(t, err, commitErr)
	require.NotSame(t, commitErr, err, "the commit error is wrapped")
	require.ErrorContains(t, err, "commit")
	require.Equal(t, []string{"begin", "commit"}, b.driver.Log(), "no hook after a failed commit, and nothing to roll back")
}

func TestInTxHookFailuresAreLogged(t *testing.T) {
	t.Parallel()

	b := setupTx(t, nil)
	err := b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		require.NoError(t, outbox.AfterCommit(ctx, func(context.Context) error {
			b.driver.add("hook 1")
			return errors.New("broker unreachable")
		}))
		require.NoError(t, outbox.AfterCommit(ctx, func(context.Context) error {
			b.driver.add("hook 2")
			panic("hook exploded")
		}))
		require.NoError(t, outbox.AfterCommit(ctx, b.driver.hook("hook 3")))
		return nil
	})
	require.NoError(t, err, "hook failures are not returned: the transaction committed")
	require.Equal(t, []string{"begin", "commit", "hook 1", "hook 2", "hook 3"}, b.driver.Log())

	out := b.logs.String()
	require.Contains(t, out, "after-commit hook failed")
	require.Contains(t, out, "broker unreachable")
	require.Contains(t, out, "hook exploded")
}

// Hooks run after the commit, when the caller's context may have ended:
// theirs does not end with it, and keeps its values.
func TestInTxHooksGetAContextThatDoesNotEnd(t *testing.T) {
	t.Parallel()

	type key struct{}
	b := setupTx(t, nil)
	var hookCtx context.Context
	ctx, cancel := context.WithCancel(context.WithValue(t.Context(), key{}, "value"))
	defer cancel()
	require.NoError(t, b.store.InTx(ctx, func(ctx context.Context, tx *fakeTx) error {
		return outbox.AfterCommit(ctx, func(ctx context.Context) error {
			hookCtx = ctx
			return nil
		})
	}))
	require.Nil(t, hookCtx.Done(), "the hook's context cannot end")
	require.Equal(t, "value", hookCtx.Value(key{}))
}

func TestInTxPanicRollsBack(t *testing.T) {
	t.Parallel()

	b := setupTx(t, nil)
	require.PanicsWithValue(t, "kaboom", func() {
		_ = b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
			require.NoError(t, outbox.AfterCommit(ctx, b.driver.hook("hook")))
			panic("kaboom")
		})
	})
	require.Equal(t, []string{"begin", "rollback"}, b.driver.Log())
}

func TestInTxConcurrentHookRegistration(t *testing.T) {
	t.Parallel()

	b := setupTx(t, nil)
	err := b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() { _ = outbox.AfterCommit(ctx, b.driver.hook(fmt.Sprint("hook ", i))) })
		}
		wg.Wait()
		return nil
	})
	require.NoError(t, err)
	require.Len(t, b.driver.Log(), 2+20)
}

func TestAfterCommitOutsideInTx(t *testing.T) {
	t.Parallel()

	noop := func(context.Context) error { return nil }
	require.ErrorIs(t, outbox.AfterCommit(t.Context(), noop), outbox.ErrNoCommitHooks)

	ctx := outbox.ContextWithTx(t.Context(), &fakeTx{})
	require.ErrorIs(t, outbox.AfterCommit(ctx, noop), outbox.ErrNoCommitHooks,
		"a transaction in the context is not enough: nobody would run the hook")

	b := setupTx(t, nil)
	var ended context.Context
	require.NoError(t, b.store.InTx(t.Context(), func(ctx context.Context, _ *fakeTx) error {
		ended = ctx
		return nil
	}))
	require.ErrorIs(t, outbox.AfterCommit(ended, noop), outbox.ErrNoCommitHooks, "the transaction has ended")
}

func TestTxFromContext(t *testing.T) {
	t.Parallel()

	t.Run("inside InTx", func(t *testing.T) {
		t.Parallel()

		b := setupTx(t, nil)
		err := b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
			got, ok := outbox.TxFromContext[*fakeTx](ctx)
			require.True(t, ok)
			require.Same(t, tx, got)
			require.Same(t, b.driver.tx, got)

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
func TestInTxSavepointHooksWaitForTheEnclosingCommit(t *testing.T) {
	t.Parallel()

	for _, outerFails := range []bool{false, true} {
		t.Run(fmt.Sprint("outer fails: ", outerFails), func(t *testing.T) {
			t.Parallel()

			outer := setupTx(t, nil)
			var inner *txBundle
			err := outer.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
				inner = outer.savepointStore(t)
				require.NoError(t, inner.store.InTx(ctx, func(ctx context.Context, _ *fakeTx) error {
					return outbox.AfterCommit(ctx, outer.driver.hook("savepoint hook"))
				}))
				require.Equal(t, []string{"begin", "commit"}, inner.driver.Log(), "released")
				require.Equal(t, []string{"begin"}, outer.driver.Log(), "the hook waits for the enclosing commit")
				if outerFails {
					return errors.New("business rule")
				}
				return nil
			})
			if outerFails {
				require.Error(t, err)
				require.Equal(t, []string{"begin", "rollback"}, outer.driver.Log())
			} else {
				require.NoError(t, err)
				require.Equal(t, []string{"begin", "commit", "savepoint hook"}, outer.driver.Log())
			}
			require.Equal(t, []bool{true}, inner.driver.commitDetached,
				"a savepoint's release, once decided, is sent whatever happens to the caller's context")
		})
	}
}

// A savepoint rolled back takes its hooks with it, while the enclosing
// transaction commits and runs its own.
func TestInTxSavepointRolledBackDropsItsHooks(t *testing.T) {
	t.Parallel()

	outer := setupTx(t, nil)
	rolledBack := errors.New("savepoint rolled back")
	require.NoError(t, outer.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		inner := outer.savepointStore(t)
		err := inner.store.InTx(ctx, func(ctx context.Context, _ *fakeTx) error {
			require.NoError(t, outbox.AfterCommit(ctx, outer.driver.hook("savepoint hook")))
			return rolledBack
		})
		require.Same(t, rolledBack, err)
		require.Equal(t, []string{"begin", "rollback"}, inner.driver.Log())
		return outbox.AfterCommit(ctx, outer.driver.hook("outer hook"))
	}))
	require.Equal(t, []string{"begin", "commit", "outer hook"}, outer.driver.Log())
}

// A savepoint in a transaction whose commit no InTx reports (the caller's
// own) can take no hooks, even inside an InTx of another transaction.
func TestInTxSavepointOfAnUnreportedTransactionTakesNoHooks(t *testing.T) {
	t.Parallel()

	callers := &fakeTx{id: 7}
	inSavepoint := func(ctx context.Context) error {
		b := setupTx(t, func(d *fakeDriver[*fakeTx]) { d.outer = callers })
		return b.store.InTx(ctx, func(ctx context.Context, _ *fakeTx) error {
			return outbox.AfterCommit(ctx, b.driver.hook("hook"))
		})
	}
	require.ErrorIs(t, inSavepoint(t.Context()), outbox.ErrNoCommitHooks)
	other := setupTx(t, nil)
	require.NoError(t, other.store.InTx(t.Context(), func(ctx context.Context, _ *fakeTx) error {
		require.ErrorIs(t, inSavepoint(ctx), outbox.ErrNoCommitHooks)
		return nil
	}))
}

// A savepoint released after its enclosing transaction's function
// returned (by a goroutine that outlived it, say) has nowhere to send its
// hooks: they are dropped, and the drop is logged.
func TestInTxSavepointAfterTheEnclosingTransactionEnded(t *testing.T) {
	t.Parallel()

	outer := setupTx(t, nil)
	var (
		ended context.Context
		inner *txBundle
	)
	require.NoError(t, outer.store.InTx(t.Context(), func(ctx context.Context, _ *fakeTx) error {
		ended, inner = ctx, outer.savepointStore(t)
		return nil
	}))
	require.NoError(t, inner.store.InTx(ended, func(ctx context.Context, _ *fakeTx) error {
		return outbox.AfterCommit(ctx, outer.driver.hook("savepoint hook"))
	}))
	require.Equal(t, []string{"begin", "commit"}, outer.driver.Log(), "the hook never runs")
	require.Contains(t, inner.logs.String(), "the enclosing transaction ended before its savepoint")
}

// After-rollback hooks run, in order, once the transaction has rolled
// back, whatever rolled it back; a failed commit counts as a rollback. A
// hook that fails or panics is logged and the next one runs.
func TestInTxAfterRollbackRunsOnEveryRollback(t *testing.T) {
	t.Parallel()

	fnErr, commitErr := errors.New("business rule violated"), errors.New("serialization failure")
	tests := []struct {
		name      string
		commitErr error
		fn        func(cancel context.CancelCauseFunc) error
		wantLog   []string // the driver's calls before the hooks
	}{
		{name: "fn error", fn: func(context.CancelCauseFunc) error { return fnErr }, wantLog: []string{"begin", "rollback"}},
		{name: "context ended", fn: func(cancel context.CancelCauseFunc) error {
			cancel(fnErr)
			return nil
		}, wantLog: []string{"begin", "rollback"}},
		{name: "commit failed", commitErr: commitErr, fn: func(context.CancelCauseFunc) error { return nil },
			wantLog: []string{"begin", "commit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setupTx(t, func(d *fakeDriver[*fakeTx]) { d.commitErr = tt.commitErr })
			ctx, cancel := context.WithCancelCause(t.Context())
			defer cancel(nil)
			err := b.store.InTx(ctx, func(ctx context.Context, tx *fakeTx) error {
				require.NoError(t, outbox.AfterCommit(ctx, b.driver.hook("after commit")))
				require.NoError(t, outbox.AfterRollback(ctx, b.driver.hook("rollback hook 1")))
				require.NoError(t, outbox.AfterRollback(ctx, func(context.Context) error { return errors.New("audit log unreachable") }))
				require.NoError(t, outbox.AfterRollback(ctx, func(context.Context) error { panic("hook exploded") }))
				require.NoError(t, outbox.AfterRollback(ctx, b.driver.hook("rollback hook 2")))
				return tt.fn(cancel)
			})
			require.Error(t, err)
			require.Equal(t, append(tt.wantLog, "rollback hook 1", "rollback hook 2"), b.driver.Log())
			out := b.logs.String()
			require.Contains(t, out, "after-rollback hook failed")
			require.Contains(t, out, "audit log unreachable")
			require.Contains(t, out, "hook exploded")
		})
	}
}

// A panic in fn rolls back and runs the after-rollback hooks, and goes on
// as it was, a hook's own panic recovered.
func TestInTxAfterRollbackOnPanic(t *testing.T) {
	t.Parallel()

	b := setupTx(t, nil)
	require.PanicsWithValue(t, "kaboom", func() {
		_ = b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
			require.NoError(t, outbox.AfterRollback(ctx, func(context.Context) error { panic("hook exploded") }))
			require.NoError(t, outbox.AfterRollback(ctx, b.driver.hook("rollback hook")))
			panic("kaboom")
		})
	})
	require.Equal(t, []string{"begin", "rollback", "rollback hook"}, b.driver.Log())
	require.Contains(t, b.logs.String(), "hook exploded")
}

func TestInTxNoAfterRollbackAfterCommit(t *testing.T) {
	t.Parallel()

	b := setupTx(t, nil)
	require.NoError(t, b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		require.NoError(t, outbox.AfterRollback(ctx, b.driver.hook("rollback hook")))
		return outbox.AfterCommit(ctx, b.driver.hook("after commit"))
	}))
	require.Equal(t, []string{"begin", "commit", "after commit"}, b.driver.Log())
}

func TestAfterRollbackOutsideInTx(t *testing.T) {
	t.Parallel()

	noop := func(context.Context) error { return nil }
	require.ErrorIs(t, outbox.AfterRollback(t.Context(), noop), outbox.ErrNoCommitHooks)

	b := setupTx(t, nil)
	var ended context.Context
	require.Error(t, b.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		ended = ctx
		return errors.New("rollback")
	}))
	require.ErrorIs(t, outbox.AfterRollback(ended, noop), outbox.ErrNoCommitHooks, "the transaction has ended")
}

// A savepoint that rolls back runs its after-rollback hooks at once, and
// the enclosing transaction, which goes on and commits, runs neither
// those nor its own.
func TestInTxSavepointRolledBackRunsItsRollbackHooksAtOnce(t *testing.T) {
	t.Parallel()

	outer := setupTx(t, nil)
	require.NoError(t, outer.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
		require.NoError(t, outbox.AfterRollback(ctx, outer.driver.hook("outer rollback hook")))
		inner := outer.savepointStore(t)
		require.Error(t, inner.store.InTx(ctx, func(ctx context.Context, _ *fakeTx) error {
			require.NoError(t, outbox.AfterRollback(ctx, inner.driver.hook("savepoint rollback hook")))
			return errors.New("savepoint rolled back")
		}))
		require.Equal(t, []string{"begin", "rollback", "savepoint rollback hook"}, inner.driver.Log())
		return nil
	}))
	require.Equal(t, []string{"begin", "commit"}, outer.driver.Log())
}

// A savepoint that is released hands its after-rollback hooks to the
// enclosing transaction: they run if it rolls back, after its own
// registered before them, and not if it commits.
func TestInTxSavepointReleasedForwardsItsRollbackHooks(t *testing.T) {
	t.Parallel()

	for _, outerFails := range []bool{false, true} {
		t.Run(fmt.Sprint("outer fails: ", outerFails), func(t *testing.T) {
			t.Parallel()

			outer := setupTx(t, nil)
			err := outer.store.InTx(t.Context(), func(ctx context.Context, tx *fakeTx) error {
				require.NoError(t, outbox.AfterRollback(ctx, outer.driver.hook("outer rollback hook")))
				inner := outer.savepointStore(t)
				require.NoError(t, inner.store.InTx(ctx, func(ctx context.Context, _ *fakeTx) error {
					return outbox.AfterRollback(ctx, outer.driver.hook("savepoint rollback hook"))
				}))
				require.Equal(t, []string{"begin", "commit"}, inner.driver.Log(), "released, no hook yet")
				if outerFails {
					return errors.New("business rule")
				}
				return nil
			})
			if outerFails {
				require.Error(t, err)
				require.Equal(t, []string{"begin", "rollback", "outer rollback hook", "savepoint rollback hook"}, outer.driver.Log())
			} else {
				require.NoError(t, err)
				require.Equal(t, []string{"begin", "commit"}, outer.driver.Log())
			}
		})
	}
}
