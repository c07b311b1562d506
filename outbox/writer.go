package outbox

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/nilcheck"
)

// WriterConfig configures a [Writer]. The zero value is a writer with no hot
// path: events are left to a poller (or to CDC).
type WriterConfig struct {
	// AfterCommit receives the events of each write once the transaction
	// commits: the hot path. It only runs for writes made in a transaction
	// begun by an InTx helper; writes in a transaction the caller begins
	// and commits are left to the poller. Events with a DeliverAfter time
	// never go to it. Its error is logged, never returned to the writer's
	// caller. Default: none.
	//
	// claimLeft is what is left, at the commit, of the claim the events
	// were written under (ClaimOwner's, for ClaimTimeout from a moment
	// before the insert, by Clock): ClaimTimeout less the time the
	// transaction stayed open after the write, zero or less once it ran
	// out and any relay may claim them, and zero when they were written
	// unclaimed.
	//
	// Events written in a savepoint (one opened by InTx on a
	// transaction, or one you opened yourself and is open while you write
	// through the transaction it is in) reach it only if the savepoint
	// kept them: the writer asks the store just before the top-level
	// commit, one query for each such write ([Inserter.Kept]).
	AfterCommit func(ctx context.Context, events []Envelope, claimLeft time.Duration) error

	// HotTopic reports whether the hot path takes events of a topic right
	// now; the others are written unclaimed and left to the pollers. Default:
	// every topic.
	HotTopic func(topic string) bool

	// Committed is told, once a write's transaction commits, its events
	// that are due now and that the hot path does not deliver, so that
	// relays claim them at once instead of at their next poll: those of
	// other processes through a notification of their [Topics]
	// (postgres.Notifier.Notify does that), an ordered relay of this
	// process by their aggregates. Like AfterCommit it only runs for
	// transactions begun by an InTx helper. It must not block, nor keep
	// the slice. Default: none.
	Committed func(events []Envelope)

	// Scheduled is told, once a write's transaction commits, its events
	// whose DeliverAfter is still ahead, so that a relay of this process
	// claims them when they come due rather than at its next poll. Like
	// Committed it only runs for transactions begun by an InTx helper, and
	// it must not block, nor keep the slice. Default: none.
	Scheduled func(events []Envelope)

	// ClaimOwner, when set together with AfterCommit, writes hot-path rows
	// already claimed by this owner, so that other relays' pollers leave
	// them to this process while it delivers them. If the process dies the
	// claim expires and any relay recovers the rows. Default: "" (rows are
	// written unclaimed).
	ClaimOwner string
	// ClaimTimeout is how long that claim holds. Default
	// [DefaultLockTimeout].
	ClaimTimeout time.Duration

	// Clock stamps OccurredAt when an envelope has none, and measures the
	// claimLeft that AfterCommit receives. Default [SystemClock].
	Clock Clock
}

// Writer writes events in the caller's transaction: the spec's
// OutboxWriter. It is safe for concurrent use.
type Writer[Tx any] struct {
	store Inserter[Tx]
	cfg   WriterConfig
}

// NewWriter returns a writer that inserts through store.
func NewWriter[Tx any](store Inserter[Tx], cfg WriterConfig) (*Writer[Tx], error) {
	if nilcheck.Is(store) {
		return nil, invalidRequest("writer needs a store")
	}
	if reason := checkText(cfg.ClaimOwner, MaxOwnerLen); reason != "" {
		return nil, invalidRequest("writer claim owner: %s", reason)
	}
	if cfg.ClaimTimeout < 0 {
		return nil, invalidRequest("writer claim timeout %s is negative", cfg.ClaimTimeout)
	}
	if cfg.ClaimTimeout == 0 {
		cfg.ClaimTimeout = DefaultLockTimeout
	}
	cfg.Clock = ClockOrSystem(cfg.Clock)
	return &Writer[Tx]{store: store, cfg: cfg}, nil
}

// Write validates events and inserts them in tx (one statement on
// PostgreSQL; see the stores for the others), and returns their ids in
// order. It does not commit: the events become visible
// with the caller's commit and vanish with its rollback. If ctx comes from
// an InTx helper, the configured AfterCommit hook receives the events after
// that commit.
//
// Errors: [ErrNoTransaction] for a nil tx; a [*ValidationError] (matching
// [ErrInvalidEnvelope]) for an invalid envelope, in which case nothing was
// written; the store's error; or, with the rows written, an error
// registering the after-commit hand-off in ctx (the transaction of an InTx
// helper ended already). Writing no events is a no-op. In a transaction
// of PostgreSQL's InTx the insert goes with the transaction's next
// statement: its error, such as [ErrDuplicateEvent], comes from that one,
// or from the commit.
func (w *Writer[Tx]) Write(ctx context.Context, tx Tx, events ...Envelope) ([]string, error) {
	if nilcheck.Is(tx) {
		return nil, ErrNoTransaction
	}
	if len(events) == 0 {
		return nil, nil
	}
	now := w.cfg.Clock.Now()
	prepared, err := Prepare(events, now)
	if err != nil {
		return nil, err
	}
	hot, cold := w.hotEvents(ctx, tx, prepared)
	savepoint, err := w.insert(ctx, tx, hot, cold)
	if err != nil {
		return nil, fmt.Errorf("outbox: write %d events: %w", len(prepared), err)
	}
	if err := w.afterCommit(ctx, tx, hot, cold, savepoint, now); err != nil {
		// The transaction already ended: these rows are the pollers'.
		return nil, fmt.Errorf("outbox: write: %w", err)
	}
	ids := make([]string, len(prepared))
	for i := range prepared {
		ids[i] = prepared[i].ID
	}
	return ids, nil
}

// insert writes the events in one round trip, the hot ones claimed by
// the hot path's owner when there is one.
func (w *Writer[Tx]) insert(ctx context.Context, tx Tx, hot, cold []Envelope) (savepoint uint64, err error) {
	var lease Lease
	if len(hot) > 0 && w.cfg.ClaimOwner != "" {
		lease = Lease{Owner: w.cfg.ClaimOwner, Duration: w.cfg.ClaimTimeout}
	}
	return w.store.Insert(ctx, tx, hot, cold, lease)
}

// afterCommit registers the hooks that hand hot events to the hot path
// and announce the due cold ones. Hot events written in a savepoint (a
// nonzero mark from the store), which can roll back while the transaction
// commits, stay hot only if the store finds them kept just before the
// commit. written is a moment before the insert, when their claim began.
func (w *Writer[Tx]) afterCommit(ctx context.Context, tx Tx, hot, cold []Envelope, savepoint uint64, written time.Time) error {
	if len(hot) > 0 {
		if savepoint != 0 {
			err := beforeCommit(ctx, func(ctx context.Context) (err error) {
				hot, err = w.kept(ctx, savepoint, hot)
				return err
			})
			if err != nil {
				return err
			}
		}
		err := AfterCommit(ctx, func(ctx context.Context) error {
			if len(hot) == 0 {
				return nil
			}
			var claimLeft time.Duration
			if w.cfg.ClaimOwner != "" {
				claimLeft = w.cfg.ClaimTimeout - w.cfg.Clock.Now().Sub(written)
			}
			return w.cfg.AfterCommit(ctx, hot, claimLeft)
		})
		if err != nil {
			return err
		}
	}
	if len(cold) == 0 || w.cfg.Committed == nil && w.cfg.Scheduled == nil || !w.commitReported(ctx, tx) {
		return nil
	}
	due, later := splitDelayed(cold)
	tell := func(hook func([]Envelope), events []Envelope) {
		if hook != nil && len(events) > 0 {
			hook(events)
		}
	}
	return AfterCommit(ctx, func(context.Context) error {
		tell(w.cfg.Committed, due)
		tell(w.cfg.Scheduled, later)
		return nil
	})
}

// splitDelayed returns the events due at once and those with a
// DeliverAfter ahead (which Prepare leaves set only when it is ahead).
func splitDelayed(events []Envelope) (due, later []Envelope) {
	for _, e := range events {
		if e.DeliverAfter.IsZero() {
			due = append(due, e)
		} else {
			later = append(later, e)
		}
	}
	return due, later
}

// kept returns those of events, written by the insert that returned
// savepoint, that the transaction in ctx, a top-level one about to commit,
// still holds.
func (w *Writer[Tx]) kept(ctx context.Context, savepoint uint64, events []Envelope) ([]Envelope, error) {
	tx, ok := TxFromContext[Tx](ctx)
	if !ok {
		return nil, fmt.Errorf("outbox: the transaction written in a savepoint is not a %T", tx)
	}
	ids := make([]string, len(events))
	for i := range events {
		ids[i] = events[i].ID
	}
	found, err := w.store.Kept(ctx, tx, savepoint, ids)
	if err != nil {
		return nil, fmt.Errorf("outbox: look up %d events written in a savepoint: %w", len(ids), err)
	}
	if len(found) == len(ids) {
		return events, nil // all of them (one write's ids are distinct)
	}
	kept := make(map[string]bool, len(found))
	for _, id := range found {
		kept[id] = true
	}
	return slices.DeleteFunc(events, func(e Envelope) bool { return !kept[e.ID] }), nil
}

// Topics returns the distinct topics of events, in the order they first
// appear.
func Topics(events []Envelope) []string {
	var topics []string
	for _, e := range events {
		if !slices.Contains(topics, e.Topic) {
			topics = append(topics, e.Topic)
		}
	}
	return topics
}

// commitReported reports whether tx is the very transaction whose commit
// the InTx helper in ctx reports: a savepoint or another connection may
// roll back on its own, even when a context carries it ([ContextWithTx]).
func (w *Writer[Tx]) commitReported(ctx context.Context, tx Tx) bool {
	hooks := hooksFrom(ctx)
	return hooks != nil && SameTx(hooks.tx, tx)
}

// hotEvents splits events into those the hot path will deliver after
// commit and the rest. None is hot without a hook or when the commit of
// tx is not reported; delayed events and topics the hot path does not take
// are never hot.
func (w *Writer[Tx]) hotEvents(ctx context.Context, tx Tx, events []Envelope) (hot, cold []Envelope) {
	if w.cfg.AfterCommit == nil || !w.commitReported(ctx, tx) {
		return nil, events
	}
	for _, e := range events {
		if e.DeliverAfter.IsZero() && (w.cfg.HotTopic == nil || w.cfg.HotTopic(e.Topic)) {
			hot = append(hot, e)
		} else {
			cold = append(cold, e)
		}
	}
	return hot, cold
}

// SameTx reports whether a and b are the same transaction value. Values of
// a type that cannot be compared are never the same.
func SameTx(a, b any) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}
