package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// TxFuncs are the three transaction operations of a database driver, the
// parts of a transaction helper that differ between dialects.
type TxFuncs[Tx any] struct {
	Begin    func(ctx context.Context) (Tx, error)
	Commit   func(ctx context.Context, tx Tx) error
	Rollback func(ctx context.Context, tx Tx) error
	// Within is the transaction Begin starts a savepoint in, when it does
	// (a pgx.Tx's Begin does); nil when Begin starts a transaction of its
	// own. Nothing a savepoint holds is committed before Within is, so its
	// after-commit hooks wait for that commit: see [RunInTx].
	Within any
}

// RunInTx begins a transaction, runs fn in it and commits when fn returns
// nil; it rolls back when fn returns an error or panics (the panic goes on),
// and when ctx has ended by then (it returns ctx's cause).
// After a successful commit it runs the hooks registered with [AfterCommit]
// during fn, in registration order. A hook's error or panic is logged to
// logger (nil: slog.Default()) and never returned: the transaction is
// committed, and the outbox's poller delivers whatever a failed hook would
// have. A rolled-back transaction runs no hook. Just before the commit it
// runs the checks a [Writer] registered in the transaction (which of the
// events written in savepoints they kept); a failed check rolls the
// transaction back and is returned.
//
// The context given to fn carries the transaction ([TxFromContext]) and the
// hook list. Dialects wrap this in their own InTx helper.
//
// A savepoint (funcs.Within set) commits nothing: its hooks go to the
// RunInTx running funcs.Within, to run after that commits. When no RunInTx
// in ctx runs it, nothing reports that commit, so fn gets no hook list:
// [AfterCommit] returns [ErrNoCommitHooks], and a [Writer] leaves the
// events to the pollers.
func RunInTx[Tx any](ctx context.Context, funcs TxFuncs[Tx], logger *slog.Logger, fn func(ctx context.Context, tx Tx) error) (err error) {
	tx, err := funcs.Begin(ctx)
	if err != nil {
		return fmt.Errorf("outbox: begin transaction: %w", err)
	}
	hooks := &commitHooks{tx: tx}
	var enclosing *commitHooks
	if funcs.Within != nil {
		if enclosing = hooksFrom(ctx); enclosing == nil || !SameTx(enclosing.tx, funcs.Within) {
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
			_ = funcs.Rollback(context.WithoutCancel(ctx), tx)
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
	if funcs.Within != nil {
		// For the same reason, a savepoint's release, once decided, is
		// sent whatever happens to ctx meanwhile.
		commitCtx = context.WithoutCancel(ctx)
	}
	if err := funcs.Commit(commitCtx, tx); err != nil {
		return fmt.Errorf("outbox: commit: %w", err)
	}
	if enclosing != nil {
		if !enclosing.forward(registered, checks) {
			loggerOrDefault(logger).ErrorContext(ctx, "outbox: the enclosing transaction ended before its savepoint; after-commit hooks dropped, the poller will deliver")
		}
		return nil
	}
	runHooks(context.WithoutCancel(ctx), registered, logger)
	return nil
}

// AfterCommit registers fn to run after the transaction in ctx commits. ctx
// must come from [RunInTx] (or a dialect's InTx) whose function is still
// running; otherwise it returns [ErrNoCommitHooks].
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
// returned by [RunInTx]. ctx must come from [RunInTx] whose function is
// still running; otherwise it returns [ErrNoCommitHooks].
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
// event bus). [RunInTx] does this already.
func ContextWithTx[Tx any](ctx context.Context, tx Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// TxFromContext returns the transaction of type Tx carried by ctx.
func TxFromContext[Tx any](ctx context.Context) (Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(Tx)
	return tx, ok
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
			loggerOrDefault(logger).ErrorContext(ctx, "outbox: after-commit hook failed; the poller will deliver",
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

func loggerOrDefault(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}
