package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/wmoutbox/wmoutbox/internal/nilcheck"
)

// txDriver is what runInTx needs of a driver: an [outboxdriver.Driver]
// has it.
type txDriver[Tx any] interface {
	Begin(ctx context.Context) (Tx, error)
	Commit(ctx context.Context, tx Tx) error
	Rollback(ctx context.Context, tx Tx) error
	Outer() any
}

// runInTx begins a transaction, runs fn in it and commits when fn returns
// nil; it rolls back when fn returns an error or panics (the panic goes on),
// and when ctx has ended by then (it returns ctx's cause).
// After a successful commit it runs the hooks registered with [AfterCommit]
// during fn, in registration order; otherwise, once the transaction has
// rolled back (or its commit failed), those registered with
// [AfterRollback]. A hook's error or panic is logged to logger and never
// returned: the transaction has ended by then, and for an after-commit
// hook the relays' claims deliver whatever a failed hook would have. Just
// before the commit it runs the checks a [Writer] registered in the
// transaction (which of the events written in savepoints they kept); a
// failed check rolls the transaction back and is returned.
//
// The context given to fn carries the transaction ([TxFromContext]) and the
// hook list.
//
// A savepoint (d.Outer() set) commits nothing: when it is released, its
// hooks go to the runInTx running the outer transaction, to run when that
// one ends; when it rolls back, its after-rollback hooks run at once. When
// no runInTx in ctx runs the outer transaction, nothing reports how it
// ends, so fn gets no hook list: [AfterCommit] and [AfterRollback] return
// [ErrNoCommitHooks], and a [Writer] leaves the events to the relays'
// claims.
func runInTx[Tx any](ctx context.Context, d txDriver[Tx], logger *slog.Logger, fn func(ctx context.Context, tx Tx) error) (err error) {
	tx, err := d.Begin(ctx)
	if err != nil {
		return fmt.Errorf("outbox: begin transaction: %w", err)
	}
	hooks := &txHooks{tx: tx}
	var enclosing *txHooks
	outer := d.Outer()
	if outer != nil {
		if enclosing = hooksFrom(ctx); enclosing == nil || !nilcheck.Same(enclosing.tx, outer) {
			enclosing, hooks = nil, nil
		}
	}
	txCtx := context.WithValue(context.WithValue(ctx, txHooksKey{}, hooks), txKey{}, tx)

	var (
		registered hookSet
		sent       bool // the commit (or release) was sent: nothing left to roll back
		committed  bool // and it succeeded
	)
	defer func() {
		if committed {
			return
		}
		if !sent {
			// The caller's error (or panic) matters more than the
			// rollback's; a failed rollback ends with the connection anyway.
			_ = d.Rollback(context.WithoutCancel(ctx), tx)
		}
		runHooks(context.WithoutCancel(ctx), hooks.close().rollbacks, logger, "outbox: after-rollback hook failed")
	}()
	err = fn(txCtx, tx)
	registered = hooks.close()
	if err != nil {
		return err
	}
	if enclosing == nil {
		for _, check := range registered.checks {
			if err := check(txCtx); err != nil {
				return fmt.Errorf("outbox: before commit: %w", err)
			}
		}
	}
	// A context that ended fails the transaction here, rolled back, rather
	// than in the commit: pgx then sends no RELEASE for a savepoint and
	// marks it done, leaving its writes to the enclosing commit.
	if ctx.Err() != nil {
		return fmt.Errorf("outbox: commit: %w", context.Cause(ctx))
	}
	sent = true // from here on there is nothing left to roll back
	commitCtx := ctx
	if outer != nil {
		// For the same reason, a savepoint's release, once decided, is
		// sent whatever happens to ctx meanwhile.
		commitCtx = context.WithoutCancel(ctx)
	}
	if err := d.Commit(commitCtx, tx); err != nil {
		// Counted as a rollback: the database undoes a transaction whose
		// commit fails (or, its connection lost, may have committed it:
		// the hooks hear what InTx returns).
		return fmt.Errorf("outbox: commit: %w", err)
	}
	committed = true
	if enclosing != nil {
		if !enclosing.forward(registered) {
			logger.ErrorContext(ctx, "outbox: the enclosing transaction ended before its savepoint; its after-commit and after-rollback hooks dropped, the relays' claims will deliver")
		}
		return nil
	}
	runHooks(context.WithoutCancel(ctx), registered.commits, logger, "outbox: after-commit hook failed; the relays' claims will deliver")
	return nil
}

// AfterCommit registers fn to run after the transaction in ctx commits. ctx
// must come from [Store.InTx] whose function is still running; otherwise it
// returns [ErrNoCommitHooks]. A hook's error or panic is logged, never
// returned: the transaction is committed by then.
func AfterCommit(ctx context.Context, fn func(ctx context.Context) error) error {
	if !hooksFrom(ctx).forward(hookSet{commits: []func(context.Context) error{fn}}) {
		return ErrNoCommitHooks
	}
	return nil
}

// AfterRollback registers fn to run after the transaction in ctx rolls
// back, whatever the reason: its function returned an error or panicked,
// its context ended, a check before the commit failed, or the commit
// failed. It never runs after a commit. ctx must come from [Store.InTx]
// whose function is still running; otherwise it returns
// [ErrNoCommitHooks]. A hook's error or panic is logged, never returned:
// InTx returns what rolled the transaction back (or panics with it).
//
// Registered in a savepoint (an InTx of a store on a transaction of an
// enclosing InTx), fn runs at once if the savepoint rolls back, and if it
// is released, when the enclosing transaction rolls back.
func AfterRollback(ctx context.Context, fn func(ctx context.Context) error) error {
	if !hooksFrom(ctx).forward(hookSet{rollbacks: []func(context.Context) error{fn}}) {
		return ErrNoCommitHooks
	}
	return nil
}

// beforeCommit registers check to run in the transaction of ctx just
// before it commits; for a savepoint, before the transaction it is in
// commits, and only if the savepoint was released. The context check gets
// carries that transaction ([TxFromContext]); an error rolls it back and is
// returned by runInTx. ctx must come from runInTx whose function is still
// running; otherwise it returns [ErrNoCommitHooks].
func beforeCommit(ctx context.Context, check func(ctx context.Context) error) error {
	if !hooksFrom(ctx).forward(hookSet{checks: []func(context.Context) error{check}}) {
		return ErrNoCommitHooks
	}
	return nil
}

// hooksFrom returns the hook list in ctx, nil when there is none.
func hooksFrom(ctx context.Context) *txHooks {
	hooks, _ := ctx.Value(txHooksKey{}).(*txHooks)
	return hooks
}

// ContextWithTx returns a context carrying tx, for APIs that find the
// transaction in a context (such as a Watermill publisher used by a CQRS
// event bus). [Store.InTx] does this already.
func ContextWithTx[Tx any](ctx context.Context, tx Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// TxFromContext returns the transaction of type Tx carried by ctx.
func TxFromContext[Tx any](ctx context.Context) (Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(Tx)
	return tx, ok
}

// TxInContext returns the transaction ctx carries, of whatever type, nil
// when it carries none: for an error that names what it found when
// [TxFromContext] finds no transaction of the type it wants (a *sql.Tx
// given to a PostgreSQL store, whose transactions are pgx.Tx).
func TxInContext(ctx context.Context) any {
	return ctx.Value(txKey{})
}

type (
	txHooksKey struct{}
	txKey      struct{}
)

// txHooks are the hooks to run when tx ends, and the checks to run
// before it commits. A nil list takes none: nothing reports how tx ends.
type txHooks struct {
	tx     any
	mu     sync.Mutex
	set    hookSet
	closed bool // the transaction has ended: no more hooks
}

// hookSet holds the functions registered in a transaction, each kind in
// registration order.
type hookSet struct {
	commits   []func(ctx context.Context) error // [AfterCommit]
	checks    []func(ctx context.Context) error // beforeCommit
	rollbacks []func(ctx context.Context) error // [AfterRollback]
}

// forward registers set (one hook, or those of a savepoint that was
// released), or reports false when the transaction has ended or h is nil.
func (h *txHooks) forward(set hookSet) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.set.commits = append(h.set.commits, set.commits...)
	h.set.checks = append(h.set.checks, set.checks...)
	h.set.rollbacks = append(h.set.rollbacks, set.rollbacks...)
	return true
}

// close ends registration and returns what was registered, the same
// each time it is called.
func (h *txHooks) close() hookSet {
	if h == nil {
		return hookSet{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	return h.set
}

// runHooks runs fns in order, logging msg with the error of each that
// fails or panics.
func runHooks(ctx context.Context, fns []func(ctx context.Context) error, logger *slog.Logger, msg string) {
	for i, fn := range fns {
		if err := runHook(ctx, fn); err != nil {
			logger.ErrorContext(ctx, msg, slog.Int("hook", i), slog.Any("error", err))
		}
	}
}

func runHook(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return fn(ctx)
}
