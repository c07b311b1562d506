package watermilladapter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	policy := outbox.Backoff{Base: time.Second, MaxAttempts: 3, NoJitter: true}
	failed := errors.New("broker down")
	later := outbox.RetryAfter(time.Minute, errors.New("rate limited"))
	limited := outbox.FailRetryAfter(30*time.Second, errors.New("HTTP 429"))
	deferral := func(err error) update {
		return update{id: "e", status: outbox.StatusNew, nextAt: now.Add(time.Minute), err: err.Error()}
	}
	tests := []struct {
		name    string
		attempt int
		err     error
		want    update
	}{
		{"delivered", 1, nil, update{id: "e", status: outbox.StatusDone}},
		{"failed, attempts left", 2, failed,
			update{id: "e", status: outbox.StatusRetry, nextAt: now.Add(2 * time.Second), err: "broker down", attempt: 2}},
		{"failed, no attempt left", 3, failed, update{id: "e", status: outbox.StatusDead, err: "broker down", attempt: 3}},
		{"permanent", 1, outbox.Permanent(failed),
			update{id: "e", status: outbox.StatusDead, err: outbox.Permanent(failed).Error(), attempt: 1}},
		{"retry after, even with no attempt left", 3, later, deferral(later)},
		{"retry after wrapping a permanent error", 1, outbox.RetryAfter(time.Minute, outbox.Permanent(failed)),
			deferral(outbox.RetryAfter(time.Minute, outbox.Permanent(failed)))},
		{"permanent wrapping a retry after", 1, outbox.Permanent(later), deferral(outbox.Permanent(later))},
		{"retry after in a wrapped chain", 1, fmt.Errorf("handler: %w", later), deferral(fmt.Errorf("handler: %w", later))},
		{"fail, retry after: the attempt spent, the delay asked for", 1, limited,
			update{id: "e", status: outbox.StatusRetry, nextAt: now.Add(30 * time.Second), err: limited.Error(), attempt: 1}},
		{"fail, retry after, no attempt left", 3, limited, update{id: "e", status: outbox.StatusDead, err: limited.Error(), attempt: 3}},
		{"fail, retry after wrapping a permanent error", 2, outbox.FailRetryAfter(30*time.Second, outbox.Permanent(failed)),
			update{id: "e", status: outbox.StatusRetry, nextAt: now.Add(30 * time.Second),
				err: outbox.FailRetryAfter(30*time.Second, outbox.Permanent(failed)).Error(), attempt: 2}},
		{"permanent wrapping a fail, retry after", 2, outbox.Permanent(limited),
			update{id: "e", status: outbox.StatusRetry, nextAt: now.Add(30 * time.Second), err: outbox.Permanent(limited).Error(), attempt: 2}},
		{"retry after wrapping a fail, retry after", 3, outbox.RetryAfter(time.Minute, limited),
			deferral(outbox.RetryAfter(time.Minute, limited))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, decide("e", tt.attempt, tt.err, policy, now))
		})
	}
}

// outcomeDriver records the outcome statements it is given, and fails
// them with the errors set.
type outcomeDriver struct {
	outboxdriver.Executor // nil: the relay's other statements are not these tests'
	doneErr, outcomesErr  error
	calls                 []any // MarkDoneParams and RecordOutcomesParams, in order
}

func (d *outcomeDriver) MarkDone(_ context.Context, p outboxdriver.MarkDoneParams) (int64, error) {
	d.calls = append(d.calls, p)
	return int64(len(p.IDs)), d.doneErr
}

func (d *outcomeDriver) RecordOutcomes(_ context.Context, p outboxdriver.RecordOutcomesParams) (int64, error) {
	for i := range p.Outcomes {
		if !p.Outcomes[i].AttemptsChecked {
			p.Outcomes[i].AttemptsBefore = 0 // means nothing unchecked
		}
	}
	d.calls = append(d.calls, p)
	return int64(len(p.Outcomes)), d.outcomesErr
}

// recordUpdates sends the DONE outcomes of a batch as ids alone, in one
// statement, and the others with every field in one more: failures spend
// an attempt and check it (an outcome sent twice counts once), deferrals
// neither; errors are cut to what last_error keeps. Of several outcomes
// of one event, a DONE counts, else the last.
func TestRecordUpdates(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	next := now.Add(time.Minute)
	retry := func(id string, attempt int) update {
		return update{id: id, status: outbox.StatusRetry, nextAt: next, err: "broker down", attempt: attempt}
	}
	retryOutcome := func(id string, attempts int) outboxdriver.Outcome {
		return outboxdriver.Outcome{ID: id, Status: int16(outbox.StatusRetry), AttemptSpent: true, NextAt: next,
			Error: "broker down", AttemptsChecked: true, AttemptsBefore: attempts}
	}
	marked := func(ids ...string) outboxdriver.MarkDoneParams {
		return outboxdriver.MarkDoneParams{Now: now, IDs: ids}
	}
	// Every outcome with an error comes with the error's failure group.
	recorded := func(outcomes ...outboxdriver.Outcome) outboxdriver.RecordOutcomesParams {
		for i := range outcomes {
			if outcomes[i].Error != "" {
				outcomes[i].ErrorGroup, _ = codec.ErrorGroup(outcomes[i].Error)
			}
		}
		return outboxdriver.RecordOutcomesParams{Now: now, Owner: "relay-1", Outcomes: outcomes}
	}
	long := strings.Repeat("é", 4500)
	notFound, _ := codec.ErrorGroup("order <n> not found")
	tests := []struct {
		name    string
		updates []update
		want    []any
	}{
		{"nothing", nil, nil},
		{"DONE ids alone, in one statement", []update{done("a"), done("b"), done("c")},
			[]any{marked("a", "b", "c")}},
		{"DONE first, then the others in one statement", []update{retry("a", 1), done("b"), dead("c", 2, errors.New("poison")), done("d")},
			[]any{marked("b", "d"), recorded(retryOutcome("a", 0),
				outboxdriver.Outcome{ID: "c", Status: int16(outbox.StatusDead), AttemptSpent: true, Error: "poison",
					AttemptsChecked: true, AttemptsBefore: 1})}},
		{"a deferral spends and checks no attempt",
			[]update{{id: "a", status: outbox.StatusNew, nextAt: next, err: "retry after 1m0s: rate limited"}},
			[]any{recorded(outboxdriver.Outcome{ID: "a", Status: int16(outbox.StatusNew), NextAt: next, Error: "retry after 1m0s: rate limited"})}},
		{"a failure of no known attempt is not checked", []update{dead("a", 0, errors.New("malformed"))},
			[]any{recorded(outboxdriver.Outcome{ID: "a", Status: int16(outbox.StatusDead), AttemptSpent: true, Error: "malformed"})}},
		{"errors cut to 4000 characters", []update{{id: "a", status: outbox.StatusRetry, nextAt: next, err: long, attempt: 3}},
			[]any{recorded(outboxdriver.Outcome{ID: "a", Status: int16(outbox.StatusRetry), AttemptSpent: true, NextAt: next,
				Error: long[:4000*len("é")], AttemptsChecked: true, AttemptsBefore: 2})}},
		{"DONE wins over a later failure", []update{done("a"), retry("a", 1)}, []any{marked("a")}},
		{"DONE wins over an earlier failure", []update{retry("a", 1), done("a"), retry("a", 2)}, []any{marked("a")}},
		{"otherwise the last counts", []update{retry("a", 1), retry("b", 1), retry("a", 2)},
			[]any{recorded(retryOutcome("b", 0), retryOutcome("a", 1))}},
		{"one DONE id per event", []update{done("a"), done("a")}, []any{marked("a")}},
		{"errors that differ by ids share a group",
			[]update{dead("a", 0, errors.New("order 1234 not found")), dead("b", 0, errors.New("order 98 not found"))},
			[]any{outboxdriver.RecordOutcomesParams{Now: now, Owner: "relay-1", Outcomes: []outboxdriver.Outcome{
				{ID: "a", Status: int16(outbox.StatusDead), AttemptSpent: true, Error: "order 1234 not found", ErrorGroup: notFound},
				{ID: "b", Status: int16(outbox.StatusDead), AttemptSpent: true, Error: "order 98 not found", ErrorGroup: notFound},
			}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			driver := &outcomeDriver{}
			_, _, err := recordUpdates(t.Context(), driver, "relay-1", now, tt.updates)
			require.NoError(t, err)
			require.Equal(t, tt.want, driver.calls)
		})
	}
}

// A failed statement fails the batch: after a DONE statement that
// failed, the other outcomes wait for the batch to be sent again.
func TestRecordUpdatesReturnsTheFirstError(t *testing.T) {
	t.Parallel()
	down := errors.New("database unreachable")
	updates := []update{done("a"), {id: "b", status: outbox.StatusRetry, nextAt: time.Now(), attempt: 1}}

	driver := &outcomeDriver{doneErr: down}
	_, _, err := recordUpdates(t.Context(), driver, "relay-1", time.Now(), updates)
	require.ErrorIs(t, err, down)
	require.Len(t, driver.calls, 1, "no statement after the one that failed")

	driver = &outcomeDriver{outcomesErr: down}
	_, _, err = recordUpdates(t.Context(), driver, "relay-1", time.Now(), updates)
	require.ErrorIs(t, err, down)
	require.Len(t, driver.calls, 2)
}
