package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"sync"
	"time"
	"weak"
)

// gate queues the writers of one *sql.DB in this process, first come first
// served. SQLite lets one writer at a time and makes the others poll for
// the lock with growing sleeps (the busy timeout), which is not fair: a
// relay claiming in a loop can hold the lock at every poll of a business
// transaction until that one gives up with SQLITE_BUSY. Writers that pass
// through the gate find the lock free instead (unless another process or
// a transaction begun outside [outbox.Store.InTx] holds it).
type gate struct {
	slot chan struct{}
	wait time.Duration // how long enter waits: BusyTimeout
}

// gates holds the gate of each *sql.DB the package writes through; an
// entry goes when its database is garbage collected.
var gates sync.Map // weak.Pointer[sql.DB] -> *gate

// gateOf returns db's gate.
func gateOf(db *sql.DB) *gate {
	key := weak.Make(db)
	if g, ok := gates.Load(key); ok {
		return g.(*gate)
	}
	g, loaded := gates.LoadOrStore(key, &gate{slot: make(chan struct{}, 1), wait: BusyTimeout})
	if !loaded {
		runtime.AddCleanup(db, func(key weak.Pointer[sql.DB]) { gates.Delete(key) }, key)
	}
	return g.(*gate)
}

// enter waits for the writers ahead to leave, at most [BusyTimeout] as
// SQLite would wait for its lock; then it fails with [ErrBusy]. op names
// the write in errors.
func (g *gate) enter(ctx context.Context, op string) error {
	select {
	case g.slot <- struct{}{}:
		return nil
	default:
	}
	timer := time.NewTimer(g.wait)
	defer timer.Stop()
	select {
	case g.slot <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sqlite: %s: waiting for the write lock: %w", op, ctx.Err())
	case <-timer.C:
		return fmt.Errorf("sqlite: %s: %w: other writers of this process held the lock for %s", op, ErrBusy, g.wait)
	}
}

// leave lets the next writer in.
func (g *gate) leave() { <-g.slot }

// write runs fn as one writer through the gate.
func (g *gate) write(ctx context.Context, op string, fn func() error) error {
	if err := g.enter(ctx, op); err != nil {
		return err
	}
	defer g.leave()
	return fn()
}
