package watermilladapter

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// take returns the next event, 2:1 hot (or streamed, from hot or the
// worker's lane) before cold so that a busy hot path never starves the
// cold one, or false when the subscription stops.
func (sub *subscription) take(worker, turn int) (queued, bool) {
	hot := sub.hot
	if sub.lanes != nil {
		hot = sub.lanes[worker]
	}
	first, second := hot, sub.cold
	if turn%3 == 2 {
		first, second = sub.cold, hot
	}
	for _, q := range []chan queued{first, second} {
		select {
		case item := <-q:
			return sub.took(item), true
		default:
		}
	}
	select {
	case item := <-hot:
		return item, true
	case item := <-sub.cold:
		return sub.took(item), true
	case <-sub.stopped.Done():
		return queued{}, false
	}
}

func (sub *subscription) took(item queued) queued {
	if item.source == SourceCold {
		signal(sub.spaceCh)
	}
	return item
}

func (sub *subscription) work(worker int) {
	// One timer per worker, for the hand-overs that wait (see handOver).
	wait := sub.s.cfg.Clock.NewTimer(time.Hour)
	wait.Stop()
	defer wait.Stop()
	for turn := 0; ; turn++ {
		if sub.stopping() {
			return
		}
		item, ok := sub.take(worker, turn)
		if !ok {
			return
		}
		sub.deliverRun(item, wait)
	}
}

// halfSpent is when half of e's claim is gone: an event not yet in a
// handler by then is left to the next claim (see process).
func (sub *subscription) halfSpent(e *outboxdriver.Row) time.Time {
	return e.LockedUntil.Add(-sub.s.cfg.LockTimeout / 2)
}

// claimHalfSpent reports whether half of e's claim is gone by now.
func (sub *subscription) claimHalfSpent(e *outboxdriver.Row) bool {
	return !e.LockedUntil.IsZero() && !sub.s.cfg.Clock.Now().Before(sub.halfSpent(e))
}

// process delivers one event and records its outcome, and reports
// whether it was acked. The DONE of an ordered event that ends its run
// (last) has the next event of its aggregate claimed once it is recorded.
func (sub *subscription) process(item queued, wait outbox.Timer, last bool) (acked bool) {
	s := sub.s
	e := &item.row
	if sub.claimHalfSpent(e) {
		// Half the claim went by while the event waited for a worker:
		// delivered now, its handler could outlive the claim, and another
		// relay claim and deliver it meanwhile; once the claim ran out,
		// another relay may be delivering it already. The claim's end
		// makes it due again for any relay, this one included. Not a
		// release: this relay may hold a newer claim of the event, queued
		// behind this one, which a release would end too. A streamed
		// event the feed leased is left to the claims, and so are the
		// events of its aggregate after it.
		s.drops.add(sub.topic, dropQueued)
		if item.leased {
			sub.parkAfterFailure(e)
			item.feed.settle()
		}
		return false
	}
	if item.source == SourceLog && !item.leased && sub.parked(e) {
		item.feed.settle() // left to the claims, behind the event that failed
		return false
	}
	if !s.inflight.tryAcquire(e.ID) {
		// Being delivered by another worker, which records its outcome.
		item.feed.settle()
		return false
	}
	defer s.inflight.release(e.ID)
	if e.Malformed != nil {
		sub.logDead("outbox: event cannot be decoded; it is DEAD", e, e.Malformed)
		s.settler.update(itemOutcome(dead(e.ID, e.Attempts+1, e.Malformed), &item))
		s.cfg.Metrics.Dead(sub.topic)
		sub.parkAfterFailure(e)
		return false
	}

	msg := toMessage(&item)
	ctx, cancel := context.WithCancel(sub.abandon)
	defer cancel()
	mctx := &messageContext{Context: ctx, policy: s.cfg.RetryPolicy, attempt: e.Attempts + 1}
	msg.SetContext(mctx)

	if !sub.handOver(msg, &item, wait) {
		return false
	}
	handed := s.cfg.Clock.Now()
	acked, answered := answer(msg, sub.abandon.Done())
	// The context ends on Ack and Nack, as Watermill's contract says, not
	// once the settler has room for the outcome, which may take as long as
	// the database does.
	cancel()
	if answered {
		s.cfg.Metrics.Handled(sub.topic, acked, s.cfg.Clock.Now().Sub(handed))
	}
	switch {
	case !answered && s.cfg.Ordered && !isDone(msg.Nacked()):
		// The handler may still be at work on e: released, e could be
		// delivered again, and the next event of its aggregate after it,
		// while this handler still holds e. The lease holds the
		// aggregate until it ends instead.
		s.cfg.Logger.Warn("outbox: handler still running at Close; ordered event left to its lease, its aggregate waits",
			slog.String("event_id", e.ID), slog.String("topic", sub.topic), slog.Time("locked_until", e.LockedUntil))
	case !answered && item.source == SourceLog:
		sub.dropStreamed(item)
	case !answered:
		s.settler.release([]releaseItem{{id: e.ID, topic: sub.topic}})
	case acked:
		o := itemOutcome(done(e.ID), &item)
		if last && sub.holdsBack(e) && sub.claimsNext(e) { // claim the next event of e's aggregate
			o.wake, o.aggregate = sub, rowAggregate(e)
		}
		s.settler.update(o)
		s.cfg.Metrics.Delivered(sub.topic, s.cfg.Clock.Now().Sub(item.since))
		return true
	default:
		u := decide(e.ID, e.Attempts+1, mctx.slot.errOr(errNacked), s.cfg.RetryPolicy, s.cfg.Clock.Now())
		if u.status == outbox.StatusDead {
			s.cfg.Metrics.Dead(sub.topic)
			sub.logDead("outbox: event is DEAD", e, errors.New(u.err))
		}
		sub.parkAfterFailure(e)
		o := itemOutcome(u, &item)
		if !u.nextAt.IsZero() {
			s.cfg.Metrics.Failed(sub.topic)
			o.wake = sub
			if sub.holdsBack(e) {
				o.aggregate = rowAggregate(e)
			}
		}
		s.settler.update(o)
	}
	return false
}

// claimsNext reports whether the DONE of e, an ordered event, is to have
// the next event of its aggregate claimed: always, but in log mode, where
// the feed delivers the next event unless the aggregate is parked.
func (sub *subscription) claimsNext(e *outboxdriver.Row) bool {
	return sub.lanes == nil || sub.isParked(e)
}

// parkAfterFailure parks e's aggregate in ordered log mode: e failed, and
// the events after it must wait for it through the ordered claims.
func (sub *subscription) parkAfterFailure(e *outboxdriver.Row) {
	if sub.lanes != nil && e.AggregateID != "" {
		sub.park(e.Seq, rowAggregate(e))
	}
}

// rowAggregate returns the aggregate of r.
func rowAggregate(r *outboxdriver.Row) outboxdriver.Aggregate {
	return outboxdriver.Aggregate{Topic: r.Topic, Type: r.AggregateType, ID: r.AggregateID}
}

// holdsBack reports whether later events of e's aggregate wait for e's
// outcome: the subscription is ordered and e has an aggregate.
func (sub *subscription) holdsBack(e *outboxdriver.Row) bool {
	return sub.s.cfg.Ordered && e.AggregateID != ""
}

// logDead logs that e is DEAD after its attempt that just ended. An
// ordered event holds back the later events of its aggregate, which the
// fields say, so that an operator knows a replay or a purge is awaited.
func (sub *subscription) logDead(msg string, e *outboxdriver.Row, err error) {
	attrs := []any{slog.String("event_id", e.ID), slog.String("topic", sub.topic), slog.Int("attempts", e.Attempts+1)}
	if sub.holdsBack(e) {
		attrs = append(attrs, slog.String("aggregate_type", e.AggregateType), slog.String("aggregate_id", e.AggregateID),
			slog.Bool("holds_back_aggregate", true))
	}
	sub.s.cfg.Logger.Error(msg, append(attrs, slog.Any("error", err))...)
}

// handOver gives msg to the subscription's reader and reports whether it
// took it. A reader busy with other messages can keep it waiting: once
// half of the event's claim is gone, msg is left to the next claim, as an
// event that waited that long in a queue is; when the subscription stops,
// the event is released.
func (sub *subscription) handOver(msg *message.Message, item *queued, wait outbox.Timer) bool {
	e := &item.row
	select {
	case sub.out <- msg:
		return true
	default:
	}
	// The clock decides, not the timer: a timer's time may be stale (one
	// GODEBUG=asynctimerchan=1 kept from before its Reset) or disagree
	// with the clock (a step back); either way the wait goes on for the
	// rest.
	for {
		var halfSpent <-chan time.Time
		if !e.LockedUntil.IsZero() {
			left := sub.halfSpent(e).Sub(sub.s.cfg.Clock.Now())
			if left <= 0 {
				sub.s.drops.add(sub.topic, dropReader)
				return false
			}
			// Left running afterwards: the next Reset moves it, which
			// costs less than a Stop and a Reset.
			wait.Reset(left)
			halfSpent = wait.C()
		}
		select {
		case sub.out <- msg:
			return true
		case <-sub.stopped.Done():
			if item.source == SourceLog {
				sub.dropStreamed(*item)
			} else {
				sub.s.settler.release([]releaseItem{{id: e.ID, topic: sub.topic}})
			}
			return false
		case <-halfSpent:
		}
	}
}

// answer waits for the handler to ack or nack msg and reports which, or
// that it did neither before abandon closed (the subscription gave up on
// its handlers). An Ack given as abandon closes counts: a select would
// pick between them at random, and a release would deliver an event its
// handler acked again. A Nack seen once abandon closed does not: giving up
// ends the message's context, which handlers answer with a Nack, and that
// must not spend an attempt (nor make the event DEAD) for a shutdown.
func answer(msg *message.Message, abandon <-chan struct{}) (acked, answered bool) {
	select {
	case <-msg.Acked():
		return true, true
	case <-msg.Nacked():
		return false, !isDone(abandon)
	case <-abandon:
	}
	select {
	case <-msg.Acked():
		return true, true
	default:
		return false, false
	}
}

// isDone reports, without waiting, whether ch, a done channel, is closed.
func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
