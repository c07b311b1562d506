package outbox_test

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// fakeTx stands for a driver's transaction.
type fakeTx struct{ id int }

// insertCall is one call of fakeDriver.Insert.
type insertCall[Tx any] struct {
	tx Tx
	p  outboxdriver.InsertParams
}

// keptCall is one call of fakeDriver.Kept.
type keptCall[Tx any] struct {
	tx        Tx
	savepoint uint64
	ids       []string
}

// markCall is one call of fakeDriver.MarkProcessed.
type markCall[Tx any] struct {
	tx           Tx
	consumer, id string
	at           time.Time
}

// batchResult is the answer of one purge batch.
type batchResult struct {
	n   int64
	err error
}

// fakeDriver is an outboxdriver.Driver that records its calls and gives
// the answers a test set. Its log lists the calls in order ("begin",
// "insert", "kept", "commit", "rollback", ...), with what a test adds
// (hooks). Set its fields before the driver is used, or under mu.
type fakeDriver[Tx any] struct {
	newTx func() Tx // what Begin returns

	mu  sync.Mutex
	log []string

	// Transactions.
	tx             Tx  // the one Begin returned last
	outer          any // what Outer returns: set, Begin opens savepoints
	beginErr       error
	commitErr      error
	commitDetached []bool // per commit: whether its context can end
	rollbackCtxErr error  // of the context the last Rollback got

	// Writes: Insert returns mark (when asked for one) and insertErr, and
	// skips the rows whose topic and idempotency key keys holds, for the
	// event id there, as a table would, and keeps the keys of the others
	// (unless RejectDuplicateKeys saw a skip); Kept finds the ids not in
	// gone, or fails with keptErr.
	inserts   []insertCall[Tx]
	insertErr error
	mark      uint64
	keys      map[[2]string]string
	gone      map[string]bool
	keptErr   error
	kepts     []keptCall[Tx]
	marks     []markCall[Tx]
	processed bool // what MarkProcessed reports

	// Operator queries: Get finds rows; QueryDead returns dead; CountDead,
	// ReplayDead and Backlog return count (and oldest); the purges return
	// batches in turn, then 0; each fails with err when set.
	rows     map[string]outboxdriver.Row
	dead     []outboxdriver.Row
	count    int64
	oldest   time.Time
	batches  []batchResult
	err      error
	queries  []outboxdriver.QueryDeadParams
	counted  []outboxdriver.DeadFilter
	replays  []outboxdriver.ReplayDeadParams
	backlogs []string
	purges   []outboxdriver.PurgeParams

	// The operator API: Stats returns stats, DeadGroups groups and
	// QueryPending and QueryEvents pending, QueryAggregate up to its limit of
	// them, each failing with err when set; PurgeDeadBatch
	// returns batches as the other purges do. Each records its parameters.
	stats         outboxdriver.StatsResult
	groups        []outboxdriver.DeadGroup
	pending       []outboxdriver.Row
	statsCalls    []outboxdriver.StatsParams
	groupQueries  []outboxdriver.DeadGroupsParams
	pendingCalls  []outboxdriver.QueryPendingParams
	eventsCalls   []outboxdriver.QueryEventsParams
	aggCalls      []outboxdriver.QueryAggregateParams
	deadPurges    []outboxdriver.PurgeDeadParams
	leaseAttempts []outboxdriver.LeaseParams

	// Leases: AcquireLease keeps them here, by name, as the lease table
	// does, or fails with leaseErr.
	leases   map[string]fakeLease
	leaseErr error
}

// fakeLease is a lease AcquireLease took.
type fakeLease struct {
	owner string
	until time.Time
}

var _ outboxdriver.Driver[*fakeTx] = (*fakeDriver[*fakeTx])(nil)

// newDriver returns a driver whose transactions are *fakeTx, numbered
// from 1 in the order Begin makes them.
func newDriver() *fakeDriver[*fakeTx] {
	n := 0
	return &fakeDriver[*fakeTx]{newTx: func() *fakeTx {
		n++
		return &fakeTx{id: n}
	}}
}

// add appends call to the log.
func (d *fakeDriver[Tx]) add(call string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.log = append(d.log, call)
}

// Log returns the calls so far.
func (d *fakeDriver[Tx]) Log() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.log)
}

// hook returns an after-commit hook that logs name.
func (d *fakeDriver[Tx]) hook(name string) func(context.Context) error {
	return func(context.Context) error {
		d.add(name)
		return nil
	}
}

// set runs fn under the driver's lock, for a test that changes its
// answers while it is in use.
func (d *fakeDriver[Tx]) set(fn func(d *fakeDriver[Tx])) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fn(d)
}

func (d *fakeDriver[Tx]) Begin(context.Context) (Tx, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.log = append(d.log, "begin")
	if d.beginErr != nil {
		var none Tx
		return none, d.beginErr
	}
	d.tx = d.newTx()
	return d.tx, nil
}

func (d *fakeDriver[Tx]) Commit(ctx context.Context, tx Tx) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if any(tx) != any(d.tx) {
		panic("commit of another transaction")
	}
	d.log = append(d.log, "commit")
	d.commitDetached = append(d.commitDetached, ctx.Done() == nil)
	return d.commitErr
}

func (d *fakeDriver[Tx]) Rollback(ctx context.Context, tx Tx) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if any(tx) != any(d.tx) {
		panic("rollback of another transaction")
	}
	d.log = append(d.log, "rollback")
	d.rollbackCtxErr = ctx.Err()
	return nil
}

func (d *fakeDriver[Tx]) Outer() any {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.outer
}

func (d *fakeDriver[Tx]) Insert(_ context.Context, tx Tx, p *outboxdriver.InsertParams) (outboxdriver.InsertResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.log = append(d.log, "insert")
	d.inserts = append(d.inserts, insertCall[Tx]{tx: tx, p: *p})
	if d.insertErr != nil {
		return outboxdriver.InsertResult{}, d.insertErr
	}
	var res outboxdriver.InsertResult
	if p.Mark {
		res.Savepoint = d.mark
	}
	written := map[[2]string]string{}
	for i, r := range p.Rows {
		if r.IdempotencyKey == "" {
			continue
		}
		key := [2]string{r.Topic, r.IdempotencyKey}
		if existing, ok := d.keys[key]; ok {
			res.Skipped = append(res.Skipped, outboxdriver.SkippedRow{Index: i, ExistingID: existing})
		} else {
			written[key] = r.ID
		}
	}
	if len(res.Skipped) > 0 && p.RejectDuplicateKeys {
		return res, nil
	}
	if d.keys == nil {
		d.keys = map[[2]string]string{}
	}
	maps.Copy(d.keys, written)
	return res, nil
}

func (d *fakeDriver[Tx]) Kept(_ context.Context, tx Tx, savepoint uint64, ids []string) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.log = append(d.log, "kept")
	d.kepts = append(d.kepts, keptCall[Tx]{tx: tx, savepoint: savepoint, ids: slices.Clone(ids)})
	if d.keptErr != nil {
		return nil, d.keptErr
	}
	var kept []string
	for _, id := range ids {
		if !d.gone[id] {
			kept = append(kept, id)
		}
	}
	return kept, nil
}

func (d *fakeDriver[Tx]) MarkProcessed(_ context.Context, tx Tx, consumer, id string, at time.Time) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.log = append(d.log, "mark processed")
	d.marks = append(d.marks, markCall[Tx]{tx: tx, consumer: consumer, id: id, at: at})
	return d.processed, d.err
}

// Inserts returns the Insert calls so far.
func (d *fakeDriver[Tx]) Inserts() []insertCall[Tx] {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.inserts)
}

// Kepts returns the Kept calls so far.
func (d *fakeDriver[Tx]) Kepts() []keptCall[Tx] {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.kepts)
}

func (d *fakeDriver[Tx]) Get(_ context.Context, id string) (outboxdriver.Row, bool, error) {
	d.add("get")
	d.mu.Lock()
	defer d.mu.Unlock()
	row, ok := d.rows[id]
	return row, ok, d.err
}

func (d *fakeDriver[Tx]) Claim(context.Context, *outboxdriver.ClaimParams) ([]outboxdriver.Row, error) {
	d.add("claim")
	return nil, nil
}

func (d *fakeDriver[Tx]) Release(context.Context, outboxdriver.ReleaseParams) (int64, error) {
	d.add("release")
	return 0, nil
}

func (d *fakeDriver[Tx]) ReleaseOwned(context.Context, outboxdriver.ReleaseOwnedParams) (int64, error) {
	d.add("release owned")
	return 0, nil
}

func (d *fakeDriver[Tx]) MarkDone(context.Context, outboxdriver.MarkDoneParams) (int64, error) {
	d.add("mark done")
	return 0, nil
}

func (d *fakeDriver[Tx]) RecordOutcomes(context.Context, outboxdriver.RecordOutcomesParams) (int64, error) {
	d.add("record outcomes")
	return 0, nil
}

func (d *fakeDriver[Tx]) QueryDead(_ context.Context, p outboxdriver.QueryDeadParams) ([]outboxdriver.Row, error) {
	d.add("query dead")
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queries = append(d.queries, p)
	return slices.Clone(d.dead), d.err
}

func (d *fakeDriver[Tx]) CountDead(_ context.Context, f outboxdriver.DeadFilter) (int64, error) {
	d.add("count dead")
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counted = append(d.counted, f)
	return d.count, d.err
}

func (d *fakeDriver[Tx]) ReplayDead(_ context.Context, p outboxdriver.ReplayDeadParams) (int64, error) {
	d.add("replay dead")
	d.mu.Lock()
	defer d.mu.Unlock()
	d.replays = append(d.replays, p)
	return d.count, d.err
}

func (d *fakeDriver[Tx]) Backlog(_ context.Context, topic string) (int64, time.Time, error) {
	d.add("backlog")
	d.mu.Lock()
	defer d.mu.Unlock()
	d.backlogs = append(d.backlogs, topic)
	return d.count, d.oldest, d.err
}

func (d *fakeDriver[Tx]) PurgeBatch(_ context.Context, p outboxdriver.PurgeParams) (int64, error) {
	d.add("purge batch")
	return d.purgeBatch(p)
}

func (d *fakeDriver[Tx]) PurgeProcessedBatch(_ context.Context, p outboxdriver.PurgeParams) (int64, error) {
	d.add("purge processed batch")
	return d.purgeBatch(p)
}

func (d *fakeDriver[Tx]) Stats(_ context.Context, p outboxdriver.StatsParams) (outboxdriver.StatsResult, error) {
	d.add("stats")
	d.mu.Lock()
	defer d.mu.Unlock()
	d.statsCalls = append(d.statsCalls, p)
	return d.stats, d.err
}

func (d *fakeDriver[Tx]) DeadGroups(_ context.Context, p outboxdriver.DeadGroupsParams) ([]outboxdriver.DeadGroup, error) {
	d.add("dead groups")
	d.mu.Lock()
	defer d.mu.Unlock()
	d.groupQueries = append(d.groupQueries, p)
	return slices.Clone(d.groups), d.err
}

func (d *fakeDriver[Tx]) QueryPending(_ context.Context, p outboxdriver.QueryPendingParams) ([]outboxdriver.Row, error) {
	d.add("query pending")
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pendingCalls = append(d.pendingCalls, p)
	return slices.Clone(d.pending), d.err
}

func (d *fakeDriver[Tx]) QueryEvents(_ context.Context, p outboxdriver.QueryEventsParams) ([]outboxdriver.Row, error) {
	d.add("query events")
	d.mu.Lock()
	defer d.mu.Unlock()
	d.eventsCalls = append(d.eventsCalls, p)
	return slices.Clone(d.pending), d.err
}

func (d *fakeDriver[Tx]) QueryAggregate(_ context.Context, p outboxdriver.QueryAggregateParams) ([]outboxdriver.Row, error) {
	d.add("query aggregate")
	d.mu.Lock()
	defer d.mu.Unlock()
	d.aggCalls = append(d.aggCalls, p)
	return slices.Clone(d.pending[:min(p.Limit, len(d.pending))]), d.err
}

func (d *fakeDriver[Tx]) PurgeDeadBatch(_ context.Context, p outboxdriver.PurgeDeadParams) (int64, error) {
	d.add("purge dead batch")
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deadPurges = append(d.deadPurges, p)
	return d.nextBatch()
}

// AcquireLease takes the lease as the dialects' upsert does.
func (d *fakeDriver[Tx]) AcquireLease(_ context.Context, p outboxdriver.LeaseParams) (bool, error) {
	d.add("acquire lease")
	d.mu.Lock()
	defer d.mu.Unlock()
	d.leaseAttempts = append(d.leaseAttempts, p)
	if d.leaseErr != nil {
		return false, d.leaseErr
	}
	if d.leases == nil {
		d.leases = make(map[string]fakeLease)
	}
	l, ok := d.leases[p.Name]
	if ok && l.owner != p.Owner && l.until.After(p.Now) {
		return false, nil
	}
	d.leases[p.Name] = fakeLease{owner: p.Owner, until: p.Until}
	return true, nil
}

// Heartbeat, ReleaseDeadRelays and EndHeartbeat are the relay's: the
// engine calls none of them.
func (d *fakeDriver[Tx]) Heartbeat(context.Context, outboxdriver.HeartbeatParams) (bool, error) {
	d.add("heartbeat")
	return true, nil
}

func (d *fakeDriver[Tx]) ReleaseDeadRelays(context.Context, outboxdriver.ReleaseDeadRelaysParams) ([]outboxdriver.ReleasedRelay, error) {
	d.add("release dead relays")
	return nil, nil
}

func (d *fakeDriver[Tx]) EndHeartbeat(context.Context, string) error {
	d.add("end heartbeat")
	return nil
}

// purgeBatch records p and returns the next of d.batches, 0 once they
// ran out.
func (d *fakeDriver[Tx]) purgeBatch(p outboxdriver.PurgeParams) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.purges = append(d.purges, p)
	return d.nextBatch()
}

// nextBatch returns the next of d.batches, 0 once they ran out; d.mu is
// held.
func (d *fakeDriver[Tx]) nextBatch() (int64, error) {
	if len(d.batches) == 0 {
		return 0, nil
	}
	next := d.batches[0]
	d.batches = d.batches[1:]
	return next.n, next.err
}

// fakeHotPath is an outbox.HotPath that records what it gets. It takes
// every topic but those in cold.
type fakeHotPath struct {
	owner string
	lease time.Duration
	cold  map[string]bool

	mu        sync.Mutex
	hot       [][]outbox.Envelope
	claimLeft []time.Duration
	committed [][]outbox.Envelope
}

var _ outbox.HotPath = (*fakeHotPath)(nil)

func (h *fakeHotPath) HotLease() (string, time.Duration) { return h.owner, h.lease }

func (h *fakeHotPath) TakesHot(topic string) bool { return !h.cold[topic] }

func (h *fakeHotPath) DeliverHot(_ context.Context, events []outbox.Envelope, claimLeft time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hot = append(h.hot, events)
	h.claimLeft = append(h.claimLeft, claimLeft)
}

func (h *fakeHotPath) Committed(events []outbox.Envelope) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.committed = append(h.committed, slices.Clone(events)) // not ours to keep
}

// Hot returns the events of each DeliverHot call so far.
func (h *fakeHotPath) Hot() [][]outbox.Envelope {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.hot)
}

// ClaimLeft returns the claimLeft of each DeliverHot call so far.
func (h *fakeHotPath) ClaimLeft() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.claimLeft)
}

// CommittedEvents returns the events of each Committed call so far.
func (h *fakeHotPath) CommittedEvents() [][]outbox.Envelope {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.committed)
}

// notifyLog is a WriterConfig.Notify that records the topics of each call.
type notifyLog struct {
	mu    sync.Mutex
	calls [][]string
}

func (n *notifyLog) notify(topics []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls = append(n.calls, slices.Clone(topics))
}

// Calls returns the topics of each call so far.
func (n *notifyLog) Calls() [][]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.calls)
}
