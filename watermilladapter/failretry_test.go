package watermilladapter

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// outcomeRecorder hands out its rows at the first claim and keeps the
// failed outcomes recorded.
type outcomeRecorder struct {
	instantDriver
	outcomesMu sync.Mutex
	rows       []outboxdriver.Row
	outcomes   []outboxdriver.Outcome
}

func (d *outcomeRecorder) Claim(context.Context, *outboxdriver.ClaimParams) ([]outboxdriver.Row, error) {
	d.outcomesMu.Lock()
	defer d.outcomesMu.Unlock()
	rows := d.rows
	d.rows = nil
	return rows, nil
}

func (d *outcomeRecorder) RecordOutcomes(ctx context.Context, p outboxdriver.RecordOutcomesParams) (int64, error) {
	d.outcomesMu.Lock()
	d.outcomes = append(d.outcomes, p.Outcomes...)
	d.outcomesMu.Unlock()
	return d.instantDriver.RecordOutcomes(ctx, p)
}

func (d *outcomeRecorder) recordedOutcomes() []outboxdriver.Outcome {
	d.outcomesMu.Lock()
	defer d.outcomesMu.Unlock()
	return slices.Clone(d.outcomes)
}

// A handler's FailRetryAfter spends the attempt and makes the event due
// after the delay it asked for, by the relay's clock, not the policy's;
// on the policy's last attempt the event is DEAD.
func TestFailRetryAfterSpendsAnAttemptOnTheFakeDriver(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(testStart)
	first := orderRow(eventID(1), testStart.Add(time.Hour))
	last := orderRow(eventID(2), testStart.Add(time.Hour))
	last.Status, last.Attempts = int16(outbox.StatusRetry), 2
	driver := &outcomeRecorder{rows: []outboxdriver.Row{first, last}}
	_, msgs := subscribeOrders(t, driver, SubscriberConfig{Clock: clock, PollInterval: time.Hour,
		RetryPolicy: outbox.Backoff{Base: time.Hour, MaxAttempts: 3, NoJitter: true}})

	limited := outbox.FailRetryAfter(30*time.Second, errors.New("downstream: HTTP 429"))
	nackedAt := clock.Now()
	for range 2 {
		msg := receive(t, msgs, "an event")
		require.True(t, RecordError(msg, limited))
		msg.Nack()
	}
	advanceUntil(t, clock, settleLinger, "both outcomes recorded", func() bool { return len(driver.recordedOutcomes()) == 2 })

	got := driver.recordedOutcomes()
	slices.SortFunc(got, func(a, b outboxdriver.Outcome) int { return strings.Compare(a.ID, b.ID) })
	// The worker decides when it takes the Nack, which the clock moving
	// for the settler may have passed: the delay runs from then.
	decidedBy := clock.Now()
	require.False(t, got[0].NextAt.Before(nackedAt.Add(30*time.Second)), "due at %v", got[0].NextAt)
	require.False(t, got[0].NextAt.After(decidedBy.Add(30*time.Second)), "due at %v, not after the delay asked for", got[0].NextAt)
	require.Equal(t, outboxdriver.Outcome{ID: first.ID, Status: int16(outbox.StatusRetry), AttemptSpent: true,
		AttemptsChecked: true, AttemptsBefore: 0, NextAt: got[0].NextAt,
		Error: limited.Error(), ErrorGroup: got[0].ErrorGroup}, got[0], "an attempt spent")
	require.Equal(t, outboxdriver.Outcome{ID: last.ID, Status: int16(outbox.StatusDead), AttemptSpent: true,
		AttemptsChecked: true, AttemptsBefore: 2, Error: limited.Error(), ErrorGroup: got[1].ErrorGroup}, got[1],
		"DEAD on the last attempt")
}
