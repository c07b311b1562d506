package outbox

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/internal/nilcheck"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// HotPath delivers events right after their transaction commits, in the
// process that wrote them, without waiting for a relay's claim:
// *watermilladapter.Subscriber is one. A [Writer] (or a Publisher) with a
// HotPath writes the events the hot path takes already claimed by it, so
// that no other relay takes them meanwhile, and hands them over once
// [Store.InTx] commits. If the process dies first, the claim runs out and
// any relay delivers them.
//
// Applications pass a HotPath to [WriterConfig] and do not call its
// methods. They are called from the committing goroutine and must not
// block.
type HotPath interface {
	// HotLease returns the claim hot events are written under: the relay's
	// owner, and how long the claim lasts (0: 5 minutes). With no owner,
	// no event is hot.
	HotLease() (owner string, lease time.Duration)
	// TakesHot reports whether the hot path takes events of topic now.
	// Events it does not take are written unclaimed, for the claims.
	TakesHot(topic string) bool
	// DeliverHot receives the hot events of a write once its transaction
	// commits. claimLeft is what is left of their claim by then: the lease
	// less the time the transaction stayed open after the write. Events
	// written in a savepoint that rolled back are not among them.
	DeliverHot(ctx context.Context, events []Envelope, claimLeft time.Duration)
	// Committed receives the other events of the commit: those due at
	// once, which a relay of this process claims now rather than at its
	// next poll, and those with a DeliverAfter ahead, which it claims when
	// they come due. The slice is not the hot path's to keep.
	Committed(events []Envelope)
}

// WriterConfig configures a [Writer]. The zero value is a writer with no
// hot path: the relays' claims deliver every event.
type WriterConfig struct {
	// HotPath, when set, delivers each event right after its commit, in
	// this process, when the event's transaction was begun by
	// [Store.InTx]: usually the watermilladapter.Subscriber of this
	// process. Writes in a transaction you begin and commit yourself are
	// left to the claims. Default: none.
	HotPath HotPath
	// Notify, when set, is told after each commit of [Store.InTx] the
	// topics of its events that are due at once and were written without
	// a hot-path claim, so that relays in other processes claim them at
	// once rather than at their next poll: usually a postgres.Notifier's
	// Notify. It must not block. Default: none.
	Notify func(topics []string)
	// Headers, when set, adds entries to each event's headers from the
	// context given to Write, before the event is written: the W3C trace
	// context, with package outboxotel's Injector. Default: none.
	Headers HeaderInjector
	// BeforeWrite are run on the events of each Write, in order, on the
	// writing goroutine, after the events are validated and their
	// defaults filled in (ids, topics, a DeliverIn resolved into
	// DeliverAfter) and after Headers has added its entries, just before
	// they are inserted. A hook may inspect the events, change their
	// headers (each event's Headers is the writer's own copy, nil when
	// it has none: set a new map), and refuse the write with an error:
	// the first error stops the hooks, nothing is written, and Write
	// returns it wrapped (errors.Is and errors.As see it). A panic goes
	// on to the caller of Write, as any panic of its function does.
	//
	// Only Headers may change: an event with any other field changed
	// fails the write with a [*ValidationError] naming the field, and
	// the headers are validated again. The payload's bytes are the
	// writer's copy and must not be modified (that is not checked). The
	// slice is the hook's to read during the call only. Hooks must be
	// safe for concurrent use. Default: none.
	BeforeWrite []func(ctx context.Context, events []Envelope) error
	// RejectDuplicateKeys makes an event whose topic and idempotency key
	// are taken an error: the write fails with a [*DuplicateKeyError]
	// (matching [ErrDuplicateKey]) and writes nothing, leaving the
	// transaction usable. Default: false, such an event is skipped and
	// the others written (see [Writer.WriteDetailed]).
	RejectDuplicateKeys bool
}

// WriteResult is what [Writer.WriteDetailed] wrote.
type WriteResult struct {
	// IDs holds, for each envelope in order, the id of its stored event:
	// its own, or for a skipped one the id of the event that holds its
	// key, so that a retried command answers with the id its first try
	// wrote.
	IDs []string
	// Skipped are the envelopes not written because their topic and
	// idempotency key were taken, in order; nil when all were written.
	Skipped []SkippedEvent
}

// SkippedEvent is an envelope not written because an event of its topic
// has its idempotency key.
type SkippedEvent struct {
	// Index is the envelope's position in the batch given to the writer.
	Index int
	// ID is the id the event would have had.
	ID string
	// Topic and IdempotencyKey are the envelope's (Topic with its
	// default filled in).
	Topic, IdempotencyKey string
	// ExistingID is the id of the event that holds the key: one in the
	// table, or an earlier envelope of the same batch.
	ExistingID string
}

// Writer writes events in the caller's transaction. It is safe for
// concurrent use.
type Writer[Tx any] struct {
	store *Store[Tx]
	cfg   WriterConfig
}

// NewWriter returns a writer on store.
func NewWriter[Tx any](store *Store[Tx], cfg WriterConfig) (*Writer[Tx], error) {
	if store == nil {
		return nil, invalidRequest("writer needs a store")
	}
	if nilcheck.Is(cfg.HotPath) {
		cfg.HotPath = nil
	}
	if nilcheck.Is(cfg.Headers) {
		cfg.Headers = nil
	}
	for i, hook := range cfg.BeforeWrite {
		if hook == nil {
			return nil, invalidRequest("writer BeforeWrite hook %d is nil", i)
		}
	}
	cfg.BeforeWrite = slices.Clone(cfg.BeforeWrite)
	return &Writer[Tx]{store: store, cfg: cfg}, nil
}

// Write validates events and inserts them in tx (in one statement on
// PostgreSQL; see the dialects for the others), and returns the ids of
// their stored events in order. It does not commit: the events become
// visible with the caller's commit and vanish with its rollback. If ctx
// comes from [Store.InTx], the hot path and Notify hear of the events
// after that commit.
//
// An event whose topic and IdempotencyKey an event in the table (or an
// earlier one of events) has is not written: its id in the result is
// that event's. [Writer.WriteDetailed] tells which were skipped.
//
// Errors: [ErrNoTransaction] for a nil tx; a [*ValidationError] (matching
// [ErrInvalidEnvelope]) for an invalid envelope, or one a BeforeWrite
// hook changed beyond its headers, and a BeforeWrite hook's error,
// wrapped, in which cases nothing was written; with
// [WriterConfig.RejectDuplicateKeys], a [*DuplicateKeyError] (matching
// [ErrDuplicateKey]) for a taken key, nothing written either; the
// driver's error; or, with the rows written, an error registering the
// after-commit hand-off in ctx (the transaction of an InTx ended
// already). Writing no events is a no-op. In a transaction of
// PostgreSQL's InTx the insert of events without an idempotency key goes
// with the transaction's next statement: its error, such as
// [ErrDuplicateEvent], comes from that one, or from the commit.
func (w *Writer[Tx]) Write(ctx context.Context, tx Tx, events ...Envelope) ([]string, error) {
	res, err := w.WriteDetailed(ctx, tx, events...)
	return res.IDs, err
}

// WriteDetailed is [Writer.Write], reporting the events it skipped
// because their topic and IdempotencyKey were taken: by an event in the
// table (committed, or written earlier in tx), by an earlier event of the
// same call, or by another transaction that commits while this write
// waits for it (if that one rolls back instead, the event is written).
// Skipping never aborts tx, on any dialect, and skipped events reach
// neither the hot path nor Notify. The errors are Write's.
func (w *Writer[Tx]) WriteDetailed(ctx context.Context, tx Tx, events ...Envelope) (WriteResult, error) {
	if nilcheck.Is(tx) {
		return WriteResult{}, ErrNoTransaction
	}
	if len(events) == 0 {
		return WriteResult{}, nil
	}
	now := w.store.clock.Now()
	prepared, err := prepare(events, now)
	if err != nil {
		return WriteResult{}, err
	}
	if w.cfg.Headers != nil {
		injectHeaders(ctx, w.cfg.Headers, prepared)
	}
	if err := w.beforeWrite(ctx, prepared); err != nil {
		return WriteResult{}, err
	}
	toWrite, skipped := repeatedKeys(prepared)
	if len(skipped) > 0 && w.cfg.RejectDuplicateKeys {
		return WriteResult{}, &DuplicateKeyError{Events: skipped}
	}
	hot, cold := w.hotEvents(ctx, tx, prepared, toWrite)
	params, err := w.insertParams(prepared, hot, cold, now)
	if err != nil {
		return WriteResult{}, err
	}
	params.RejectDuplicateKeys = w.cfg.RejectDuplicateKeys
	inserted, err := w.store.driver.Insert(ctx, tx, params)
	if err != nil {
		return WriteResult{}, fmt.Errorf("outbox: write %d events: %w", len(prepared), err)
	}
	written := slices.Concat(hot, cold)
	for _, s := range inserted.Skipped {
		skipped = append(skipped, skippedEvent(prepared, written[s.Index], s.ExistingID))
	}
	slices.SortFunc(skipped, func(a, b SkippedEvent) int { return cmp.Compare(a.Index, b.Index) })
	if len(skipped) > 0 && w.cfg.RejectDuplicateKeys {
		return WriteResult{}, &DuplicateKeyError{Events: skipped}
	}
	res := WriteResult{IDs: make([]string, len(prepared))}
	for i := range prepared {
		res.IDs[i] = prepared[i].ID
	}
	// Most writes skip nothing: isSkipped stays nil then.
	var isSkipped []bool
	if len(skipped) > 0 {
		res.Skipped = skipped
		isSkipped = make([]bool, len(prepared))
		for _, s := range skipped {
			res.IDs[s.Index], isSkipped[s.Index] = s.ExistingID, true
		}
	}
	// Rows the write skipped are another write's: not ours to hand over.
	hotEvents, coldEvents := notSkipped(prepared, hot, isSkipped), notSkipped(prepared, cold, isSkipped)
	if err := w.afterCommit(ctx, tx, hotEvents, coldEvents, inserted.Savepoint, params.LockedUntil); err != nil {
		// The transaction already ended: these rows are the claims'.
		return WriteResult{}, fmt.Errorf("outbox: write: %w", err)
	}
	return res, nil
}

// repeatedKeys returns the positions of the events to write, and as
// skipped those whose topic and idempotency key an earlier one of events
// has.
func repeatedKeys(events []Envelope) (toWrite []int, skipped []SkippedEvent) {
	toWrite = make([]int, 0, len(events))
	var first map[[2]string]int
	for i := range events {
		e := &events[i]
		if e.IdempotencyKey == "" {
			toWrite = append(toWrite, i)
			continue
		}
		key := [2]string{e.Topic, e.IdempotencyKey}
		if j, ok := first[key]; ok {
			skipped = append(skipped, skippedEvent(events, i, events[j].ID))
			continue
		}
		if first == nil {
			first = make(map[[2]string]int)
		}
		first[key] = i
		toWrite = append(toWrite, i)
	}
	return toWrite, skipped
}

// skippedEvent reports events[i] skipped for the event existing.
func skippedEvent(events []Envelope, i int, existing string) SkippedEvent {
	e := &events[i]
	return SkippedEvent{Index: i, ID: e.ID, Topic: e.Topic, IdempotencyKey: e.IdempotencyKey, ExistingID: existing}
}

// notSkipped returns the events at positions that the write did not
// skip; skipped is nil when it skipped none.
func notSkipped(events []Envelope, positions []int, skipped []bool) []Envelope {
	out := make([]Envelope, 0, len(positions))
	for _, i := range positions {
		if skipped == nil || !skipped[i] {
			out = append(out, events[i])
		}
	}
	return out
}

// injectHeaders lets inject add to the headers of prepared events, whose
// header maps are their own (see prepare).
func injectHeaders(ctx context.Context, inject HeaderInjector, events []Envelope) {
	for i := range events {
		inject.InjectHeaders(ctx, &events[i])
		if len(events[i].Headers) == 0 {
			events[i].Headers = nil
		}
	}
}

// beforeWrite runs the BeforeWrite hooks on prepared events, then checks
// that they changed no field but Headers, and that the headers are still
// valid.
func (w *Writer[Tx]) beforeWrite(ctx context.Context, events []Envelope) error {
	if len(w.cfg.BeforeWrite) == 0 {
		return nil
	}
	// The same header maps and payloads: a change of those in place goes
	// unseen, and a payload kept is found equal at once (DeepEqual
	// compares a slice with itself without reading it).
	before := slices.Clone(events)
	for i, hook := range w.cfg.BeforeWrite {
		if err := hook(ctx, events); err != nil {
			return fmt.Errorf("outbox: before write: hook %d: %w", i, err)
		}
	}
	for i := range events {
		if field := changedField(&before[i], &events[i]); field != "" {
			return &ValidationError{Index: i, Field: field, Reason: "changed by a BeforeWrite hook, which may change only Headers"}
		}
		if reason := codec.ValidateHeaders(events[i].Headers, MaxHeadersSize); reason != "" {
			return &ValidationError{Index: i, Field: "Headers", Reason: reason + " (after the BeforeWrite hooks)"}
		}
		if len(events[i].Headers) == 0 {
			events[i].Headers = nil
		}
	}
	return nil
}

// changedField returns the name of the first field of [Envelope] but
// Headers whose value differs between before and after, "" when none
// does.
func changedField(before, after *Envelope) string {
	b, a := reflect.ValueOf(before).Elem(), reflect.ValueOf(after).Elem()
	for i := range b.NumField() {
		name := b.Type().Field(i).Name
		if name != "Headers" && !reflect.DeepEqual(b.Field(i).Interface(), a.Field(i).Interface()) {
			return name
		}
	}
	return ""
}

// insertParams is the insert of events at positions hot, claimed by the
// hot path, then cold, written at now.
func (w *Writer[Tx]) insertParams(events []Envelope, hot, cold []int, now time.Time) (*outboxdriver.InsertParams, error) {
	p := &outboxdriver.InsertParams{Rows: make([]outboxdriver.InsertRow, len(hot)+len(cold)), Now: now, Mark: len(hot) > 0}
	if len(hot) > 0 {
		owner, lease := w.cfg.HotPath.HotLease()
		p.Owner, p.LockedUntil = owner, now.Add(cmp.Or(lease, defaultLockTimeout))
	}
	for j, i := range hot {
		if err := insertRow(&p.Rows[j], &events[i], now, true); err != nil {
			return nil, err
		}
	}
	for j, i := range cold {
		if err := insertRow(&p.Rows[len(hot)+j], &events[i], now, false); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// insertRow fills r with e's row, written at now, claimed or not: due at
// its DeliverAfter, or at once.
func insertRow(r *outboxdriver.InsertRow, e *Envelope, now time.Time, claimed bool) error {
	headers, err := codec.EncodeHeaders(e.Headers)
	if err != nil {
		return err
	}
	*r = outboxdriver.InsertRow{ID: e.ID, Type: string(e.Type), Topic: e.Topic, AggregateType: string(e.AggregateType),
		AggregateID: e.AggregateID, TenantID: e.TenantID, Payload: e.Payload(), PayloadJSON: e.IsJSON(), Headers: headers,
		OccurredAt: e.OccurredAt, AvailableAt: now, Claimed: claimed, IdempotencyKey: e.IdempotencyKey}
	if e.DeliverAfter.After(now) {
		r.AvailableAt = e.DeliverAfter
	}
	return nil
}

// afterCommit registers the hooks that hand hot events to the hot path
// and tell it and Notify of the cold ones. Hot events written in a
// savepoint (a nonzero mark from the driver), which can roll back while
// the transaction commits, stay hot only if the driver finds them kept
// just before the commit. claimedUntil is when their claim ends.
func (w *Writer[Tx]) afterCommit(ctx context.Context, tx Tx, hot, cold []Envelope, savepoint uint64, claimedUntil time.Time) error {
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
			w.cfg.HotPath.DeliverHot(ctx, hot, claimedUntil.Sub(w.store.clock.Now()))
			return nil
		})
		if err != nil {
			return err
		}
	}
	if len(cold) == 0 || w.cfg.HotPath == nil && w.cfg.Notify == nil || !w.commitReported(ctx, tx) {
		return nil
	}
	return AfterCommit(ctx, func(context.Context) error {
		if w.cfg.HotPath != nil {
			w.cfg.HotPath.Committed(cold)
		}
		if w.cfg.Notify != nil {
			if topics := dueTopics(cold); len(topics) > 0 {
				w.cfg.Notify(topics)
			}
		}
		return nil
	})
}

// dueTopics returns the distinct topics of the events due at once (those
// whose DeliverAfter the writer did not keep), in the order they first
// appear.
func dueTopics(events []Envelope) []string {
	var topics []string
	for _, e := range events {
		if e.DeliverAfter.IsZero() && !slices.Contains(topics, e.Topic) {
			topics = append(topics, e.Topic)
		}
	}
	return topics
}

// kept returns those of events, written by the insert that returned
// savepoint, that the transaction in ctx, a top-level one about to commit,
// still holds.
func (w *Writer[Tx]) kept(ctx context.Context, savepoint uint64, events []Envelope) ([]Envelope, error) {
	tx, ok := TxFromContext[Tx](ctx)
	if !ok {
		return nil, fmt.Errorf("outbox: the transaction written in a savepoint is not a %v", reflect.TypeFor[Tx]())
	}
	ids := make([]string, len(events))
	for i := range events {
		ids[i] = events[i].ID
	}
	found, err := w.store.driver.Kept(ctx, tx, savepoint, ids)
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

// commitReported reports whether tx is the very transaction whose commit
// the InTx in ctx reports: a savepoint or another connection may roll back
// on its own, even when a context carries it ([ContextWithTx]).
func (w *Writer[Tx]) commitReported(ctx context.Context, tx Tx) bool {
	hooks := hooksFrom(ctx)
	return hooks != nil && nilcheck.Same(hooks.tx, tx)
}

// hotEvents splits the events at positions into those the hot path will
// deliver after commit and the rest. None is hot without a hot path that
// claims them (an owner), or when the commit of tx is not reported;
// delayed events and topics the hot path does not take are never hot.
func (w *Writer[Tx]) hotEvents(ctx context.Context, tx Tx, events []Envelope, positions []int) (hot, cold []int) {
	if w.cfg.HotPath == nil || !w.commitReported(ctx, tx) {
		return nil, positions
	}
	if owner, _ := w.cfg.HotPath.HotLease(); owner == "" {
		return nil, positions // unclaimed, any relay could deliver them meanwhile
	}
	for _, i := range positions {
		if events[i].DeliverAfter.IsZero() && w.cfg.HotPath.TakesHot(events[i].Topic) {
			hot = append(hot, i)
		} else {
			cold = append(cold, i)
		}
	}
	return hot, cold
}
