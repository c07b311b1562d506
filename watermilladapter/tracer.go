package watermilladapter

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// Operations of the relay's statements, the values of
// [Statement].Operation.
const (
	// OperationClaim is a claim of a topic's due events (the cold path).
	OperationClaim = "claim"
	// OperationMarkDone records a batch of acknowledged events as DONE
	// (or deletes them).
	OperationMarkDone = "mark_done"
	// OperationRecordOutcomes records a batch of failed deliveries and
	// deferrals: RETRY, DEAD, or due again later.
	OperationRecordOutcomes = "record_outcomes"
	// OperationRelease hands claims back, due at once.
	OperationRelease = "release"
)

// Statement is a statement of the relay on the database, as a [Tracer]
// sees it.
type Statement struct {
	// Operation is one of the Operation constants.
	Operation string
	// Topic is the topic of a claim; "" for the statements of outcomes
	// and releases, whose batches mix topics.
	Topic string
	// Events is how many events the statement is about: the limit of a
	// claim, the size of a batch of outcomes or releases.
	Events int
}

// Tracer observes the relay's statements on the database: each claim,
// and each batched statement recording outcomes (one for the DONE events
// of a batch, one for the others) or releasing claims, so that a slow
// database shows in a trace. Package outboxotel's RelayTracer makes a
// span of each. A statement retried after a failure is started again.
//
// StartStatement is called before the statement, with the statement's
// context (not a delivered message's), and returns the context to run it
// with and a function the relay calls once it returns, with the rows it
// claimed or changed and its error. Implementations must be safe for
// concurrent use and fast.
type Tracer interface {
	StartStatement(ctx context.Context, st Statement) (context.Context, func(rows int, err error))
}

// tracedExecutor runs the relay's statements of Executor under tracer.
type tracedExecutor struct {
	outboxdriver.Executor
	tracer Tracer
}

func (x tracedExecutor) Claim(ctx context.Context, p *outboxdriver.ClaimParams) ([]outboxdriver.Row, error) {
	ctx, end := x.tracer.StartStatement(ctx, Statement{Operation: OperationClaim, Topic: p.Topic, Events: p.Limit})
	rows, err := x.Executor.Claim(ctx, p)
	end(len(rows), err)
	return rows, err
}

func (x tracedExecutor) MarkDone(ctx context.Context, p outboxdriver.MarkDoneParams) (int64, error) {
	ctx, end := x.tracer.StartStatement(ctx, Statement{Operation: OperationMarkDone, Events: len(p.IDs)})
	n, err := x.Executor.MarkDone(ctx, p)
	end(int(n), err)
	return n, err
}

func (x tracedExecutor) RecordOutcomes(ctx context.Context, p outboxdriver.RecordOutcomesParams) (int64, error) {
	ctx, end := x.tracer.StartStatement(ctx, Statement{Operation: OperationRecordOutcomes, Events: len(p.Outcomes)})
	n, err := x.Executor.RecordOutcomes(ctx, p)
	end(int(n), err)
	return n, err
}

func (x tracedExecutor) Release(ctx context.Context, p outboxdriver.ReleaseParams) (int64, error) {
	ctx, end := x.tracer.StartStatement(ctx, Statement{Operation: OperationRelease, Events: len(p.IDs)})
	n, err := x.Executor.Release(ctx, p)
	end(int(n), err)
	return n, err
}

// Outcome returns the status the relay records if the handler of msg, a
// message a [Subscriber] delivered, ends with err and the message is
// nacked (acked, for a nil err): [outbox.StatusDone] for nil;
// [outbox.StatusNew] for an [outbox.RetryAfter] error (due again later,
// no attempt spent); [outbox.StatusDead] for an [outbox.Permanent] error
// (not also marked with RetryAfter or [outbox.FailRetryAfter]) or when the
// subscriber's RetryPolicy has no attempt left after this one;
// [outbox.StatusRetry] otherwise. It reports false for a message
// that no Subscriber delivered. Tracing middleware calls it to end a
// span with the outcome before the router nacks; a retry policy that
// decides at random may decide otherwise when the Nack comes.
func Outcome(msg *message.Message, err error) (outbox.Status, bool) {
	mc, ok := msg.Context().Value(outcomeKey{}).(*messageContext)
	if !ok {
		return 0, false
	}
	if err == nil {
		return outbox.StatusDone, true
	}
	return decide("", mc.attempt, err, mc.policy, time.Time{}).status, true
}
