package watermilladapter

import (
	"cmp"
	"slices"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// An ordered claim with runs (SubscriberConfig.OrderedRunLength) leases,
// with the first event not DONE of an aggregate (its head), the events
// after it. The head goes on the cold queue carrying the rest of its run;
// the worker that takes it delivers the run in order, each event as soon
// as the one before is acked, and records the DONEs in batches as any
// other. Until the run's last DONE is recorded, the aggregate's first
// event not DONE is one of the run's, leased to this relay, so that no
// other claim takes the aggregate. The events of a run that are not handed
// out (a Nack, a DEAD event, Close) are released: they sit behind the
// event that stopped the run, which holds the aggregate as Ordered says
// until its outcome is recorded.

// takeRuns turns the rows of a claim with runs into the cold queue's
// items, in the rows' order: each head carries its run's other events, in
// run order, counted in held until a worker takes or releases them. A row
// whose run has a gap before it (which a driver never returns) is
// released, with the rest of its run.
func (sub *subscription) takeRuns(rows []outboxdriver.Row) []queued {
	type runKey struct {
		aggregate outboxdriver.Aggregate
		keyless   string
	}
	keyOf := func(r *outboxdriver.Row) runKey {
		if r.AggregateID == "" {
			return runKey{keyless: r.ID}
		}
		return runKey{aggregate: rowAggregate(r)}
	}
	followers := make(map[runKey][]outboxdriver.Row)
	var items []queued
	for i := range rows {
		if r := &rows[i]; r.RunIndex > 0 {
			followers[keyOf(r)] = append(followers[keyOf(r)], *r)
		}
	}
	var stray []outboxdriver.Row
	for i := range rows {
		r := &rows[i]
		if r.RunIndex > 0 {
			continue
		}
		item := coldItem(*r)
		run := followers[keyOf(r)]
		delete(followers, keyOf(r))
		slices.SortFunc(run, func(a, b outboxdriver.Row) int { return cmp.Compare(a.RunIndex, b.RunIndex) })
		for j, f := range run {
			if f.RunIndex != j+1 {
				stray = append(stray, run[j:]...)
				break
			}
			item.run = append(item.run, coldItem(f))
		}
		sub.held.Add(int64(len(item.run)))
		items = append(items, item)
	}
	for _, run := range followers {
		stray = append(stray, run...)
	}
	sub.releaseEvents(stray)
	return items
}

// deliverRun delivers item and, while each is acked, the rest of its run.
func (sub *subscription) deliverRun(item queued, wait outbox.Timer) {
	run := item.run
	item.run = nil
	for {
		if !sub.process(item, wait, len(run) == 0) || len(run) == 0 {
			sub.releaseRun(run)
			return
		}
		if sub.stopping() || sub.claimHalfSpent(&run[0].row) {
			// Not handed out: released, as events still queued are at
			// Close. One that waited for half its claim is released too:
			// its claim is still this run's, which no other claim can
			// hold, and left to its lease it would hold the aggregate
			// until the lease ends.
			sub.releaseRun(run)
			return
		}
		item, run = run[0], run[1:]
		sub.held.Add(-1)
		signal(sub.spaceCh)
	}
}

// releaseRun hands back the events of a run that were not handed out, but
// for those whose claim has run out: another claim may hold them now.
func (sub *subscription) releaseRun(run []queued) {
	if len(run) == 0 {
		return
	}
	sub.held.Add(-int64(len(run)))
	signal(sub.spaceCh)
	now := sub.s.cfg.Clock.Now()
	var items []releaseItem
	for _, q := range run {
		if now.Before(q.row.LockedUntil) {
			items = append(items, releaseItem{id: q.row.ID, topic: sub.topic})
		}
	}
	if len(items) > 0 {
		sub.s.settler.release(items)
	}
}
