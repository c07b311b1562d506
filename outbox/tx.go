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
// during fn, in registration order. A hook's error or panic is logged to
// logger and never returned: the transaction is committed, and the relays'
// claims deliver whatever a failed hook would have. A rolled-back
// transaction runs no hook. Just before the commit it runs the checks a
// [Writer] registered in the transaction (which of the events written in
// savepoints they kept); a failed check rolls the transaction back and is
// returned.
//
// The context given to fn carries the transaction ([TxFromContext]) and the
// hook list.
//
// A savepoint (d.Outer() set) commits nothing: its hooks go to the
// runInTx running the outer transaction, to run after that commits. When
// no runInTx in ctx runs it, nothing reports that commit, so fn gets no
// hook list: [AfterCommit] returns [ErrNoCommitHooks], and a [Writer]
// leaves the events to the relays' claims.
func runInTx[Tx any](ctx context.Context, d txDriver[Tx], logger *slog.Logger, fn func(ctx context.Context, tx Tx) error) (err error) {
	tx, err := d.Begin(ctx)
	if err != nil {
		return fmt.Errorf("outbox: begin transaction: %w", err)
	}
	hooks := &commitHooks{tx: tx}
	var enclosing *commitHooks
	outer := d.Outer()
	if outer != nil {
		if enclosing = hooksFrom(ctx); enclosing == nil || !nilcheck.Same(enclosing.tx, outer) {
			enclosing, hooks = nil, nil
		}
	}
	txCtx := context.WithValue(context.WithValue(ctx, commitHooksKey{}, hooks), txKey{}, tx)

	committed := false
	defer func() {
		hooks.close()
		if !committed {
			// The caller's error (or panic) matters more than the
			// rollback's; a failed rollback ends with the connection anyway.
			_ = d.Rollback(context.WithoutCancel(ctx), tx)
		}
	}()
	err = fn(txCtx, tx)
	registered, checks := hooks.close()
	if err != nil {
		return err
	}
	if enclosing == nil {
		for _, check := range checks {
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
	committed = true // from here on there is nothing left to roll back
	commitCtx := ctx
	if outer != nil {
		// For the same reason, a savepoint's release, once decided, is
		// sent whatever happens to ctx meanwhile.
		commitCtx = context.WithoutCancel(ctx)
	}
	if err := d.Commit(commitCtx, tx); err != nil {
		return fmt.Errorf("outbox: commit: %w", err)
	}
	if enclosing != nil {
		if !enclosing.forward(registered, checks) {
			logger.ErrorContext(ctx, "outbox: the enclosing transaction ended before its savepoint; after-commit hooks dropped, the relays' claims will deliver")
		}
		return nil
	}
	runHooks(context.WithoutCancel(ctx), registered, logger)
	return nil
}

// AfterCommit registers fn to run after the transaction in ctx commits. ctx
// must come from [Store.InTx] whose function is still running; otherwise it
// returns [ErrNoCommitHooks]. A hook's error or panic is logged, never
// returned: the transaction is committed by then.
func AfterCommit(ctx context.Context, fn func(ctx context.Context) error) error {
	if !hooksFrom(ctx).add(fn) {
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
	if !hooksFrom(ctx).addCheck(check) {
		return ErrNoCommitHooks
	}
	return nil
}

// hooksFrom returns the hook list in ctx, nil when there is none.
func hooksFrom(ctx context.Context) *commitHooks {
	hooks, _ := ctx.Value(commitHooksKey{}).(*commitHooks)
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
	commitHooksKey struct{}
	txKey          struct{}
)

// commitHooks are the hooks to run after tx commits, and the checks to
// run before. A nil list takes none: nothing reports the commit.
type commitHooks struct {
	tx     any
	mu     sync.Mutex
	fns    []func(ctx context.Context) error
	checks []func(ctx context.Context) error
	closed bool // the transaction has ended: no more hooks
}

// add registers fn, or reports false when the transaction has ended or h
// is nil.
func (h *commitHooks) add(fn func(ctx context.Context) error) bool {
	return h.forward([]func(ctx context.Context) error{fn}, nil)
}

// addCheck registers check as add registers a hook.
func (h *commitHooks) addCheck(check func(ctx context.Context) error) bool {
	return h.forward(nil, []func(ctx context.Context) error{check})
}

// forward registers hooks and checks, those of a savepoint that was
// released, or reports false when the transaction has ended or h is nil.
func (h *commitHooks) forward(fns, checks []func(ctx context.Context) error) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.fns = append(h.fns, fns...)
	h.checks = append(h.checks, checks...)
	return true
}

// close ends registration and returns the hooks and checks registered so
// far.
func (h *commitHooks) close() (fns, checks []func(ctx context.Context) error) {
	if h == nil {
		return nil, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	fns, checks = h.fns, h.checks
	h.fns, h.checks = nil, nil
	return fns, checks
}

func runHooks(ctx context.Context, fns []func(ctx context.Context) error, logger *slog.Logger) {
	for i, fn := range fns {
		if err := runHook(ctx, fn); err != nil {
			logger.ErrorContext(ctx, "outbox: after-commit hook failed; the relays' claims will deliver",
				slog.Int("hook", i), slog.Any("error", err))
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
