package watermilladapter

import (
	"context"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// update is the outcome of a delivery attempt, to record in the event's
// row.
type update struct {
	id string
	// status is DONE, RETRY or DEAD, or NEW for a deferral: the status
	// stays, and no attempt is spent.
	status outbox.Status
	// nextAt is when a RETRY or deferred event is due again.
	nextAt time.Time
	// err goes to last_error; "" keeps the one there.
	err string
	// attempt is the number of the attempt a RETRY or DEAD reports (1 for
	// the first): the outcome applies only while the event has attempt-1
	// failed attempts recorded, so that an outcome written twice (a
	// statement sent again after its reply was lost) counts once and leaves
	// a newer claim alone. 0 leaves it unchecked.
	attempt int
	// unleased marks the outcome of an event no claim leased (one a feed
	// streamed): it applies while no claim leases the event, whoever
	// reports it.
	unleased bool
}

func done(id string) update { return update{id: id, status: outbox.StatusDone} }

// dead is the outcome of attempt that makes the event DEAD with err.
func dead(id string, attempt int, err error) update {
	return update{id: id, status: outbox.StatusDead, err: err.Error(), attempt: attempt}
}

// decide turns the outcome of delivery attempt number attempt (1 for the
// first) into the update to record: DONE for a nil err; a deferral for
// [outbox.RetryAfter]; DEAD for an [outbox.Permanent] error or when
// policy has no attempts left; RETRY otherwise, due after the delay of an
// [outbox.FailRetryAfter] or else the policy's. now is when the outcome is
// known. An error carrying a RetryAfter or FailRetryAfter and a Permanent
// mark, whichever wraps the other, is retried: a retry costs one more
// delivery, while DEAD would stop one that was asked for. A RetryAfter
// counts before a FailRetryAfter.
func decide(id string, attempt int, err error, policy outbox.RetryPolicy, now time.Time) update {
	if err == nil {
		return done(id)
	}
	if d, ok := outbox.RetryAfterDelay(err); ok {
		return update{id: id, status: outbox.StatusNew, nextAt: now.Add(d), err: err.Error()}
	}
	requested, failRetry := outbox.FailRetryAfterDelay(err)
	if !failRetry && outbox.IsPermanent(err) {
		return dead(id, attempt, err)
	}
	delay, ok := policy.NextRetry(attempt)
	if !ok {
		return dead(id, attempt, err)
	}
	if failRetry {
		delay = requested
	}
	return update{id: id, status: outbox.StatusRetry, nextAt: now.Add(delay), err: err.Error(), attempt: attempt}
}

// outcome is u for a driver: its error cut to fit last_error, with the
// error's failure group (codec.ErrorGroup) for error_group.
func (u *update) outcome() outboxdriver.Outcome {
	spent := u.status == outbox.StatusRetry || u.status == outbox.StatusDead
	o := outboxdriver.Outcome{ID: u.id, Status: int16(u.status), AttemptSpent: spent, NextAt: u.nextAt,
		Error: codec.CutError(u.err), AttemptsChecked: spent && u.attempt > 0, AttemptsBefore: max(u.attempt-1, 0)}
	if o.Error != "" {
		o.ErrorGroup, _ = codec.ErrorGroup(u.err)
	}
	return o
}

// recordUpdates records updates, reported by owner at now, in three
// statements at most: the DONE ones by id, the others with every field,
// those of leased and of unleased events apart.
// DONE outcomes, the bulk of every batch, go as ids alone, which costs the
// driver and the database less. Of several updates of one event, a DONE
// counts, as in the table, where no later outcome changes a DONE row (an
// event delivered twice, once acked and once nacked, was delivered);
// otherwise the last. It returns how many of the events it sent updates
// for (one per event) changed, and how many it sent.
func recordUpdates(ctx context.Context, driver outboxdriver.Executor, owner string, now time.Time, updates []update) (changed, sent int64, err error) {
	var ids []string
	var failed, unleased []outboxdriver.Outcome
	last := make(map[string]int, len(updates)) // the update of each event that counts
	for i := range updates {
		if k, seen := last[updates[i].id]; !seen || updates[k].status != outbox.StatusDone {
			last[updates[i].id] = i
		}
	}
	for i := range updates {
		switch u := &updates[i]; {
		case last[u.id] != i:
		case u.status == outbox.StatusDone:
			ids = append(ids, u.id)
		case u.unleased:
			unleased = append(unleased, u.outcome())
		default:
			failed = append(failed, u.outcome())
		}
	}
	sent = int64(len(ids) + len(failed) + len(unleased))
	if len(ids) > 0 {
		n, err := driver.MarkDone(ctx, outboxdriver.MarkDoneParams{Now: now, IDs: ids})
		if err != nil {
			return 0, sent, err
		}
		changed += n
	}
	for _, batch := range []struct {
		owner    string
		outcomes []outboxdriver.Outcome
	}{{owner, failed}, {"", unleased}} {
		if len(batch.outcomes) == 0 {
			continue
		}
		p := outboxdriver.RecordOutcomesParams{Now: now, Owner: batch.owner, Outcomes: batch.outcomes}
		n, err := driver.RecordOutcomes(ctx, p)
		if err != nil {
			return 0, sent, err
		}
		changed += n
	}
	return changed, sent, nil
}
