package watermilladapter

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// statementLog is a Tracer that logs the statements it sees and how they
// ended.
type statementLog struct {
	mu    sync.Mutex
	begun []Statement
	rows  []int
}

func (l *statementLog) StartStatement(ctx context.Context, st Statement) (context.Context, func(int, error)) {
	l.mu.Lock()
	l.begun = append(l.begun, st)
	i := len(l.rows)
	l.rows = append(l.rows, -1)
	l.mu.Unlock()
	return ctx, func(rows int, _ error) {
		l.mu.Lock()
		l.rows[i] = rows
		l.mu.Unlock()
	}
}

func (l *statementLog) of(op string) (sts []Statement, rows []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, st := range l.begun {
		if st.Operation == op {
			sts, rows = append(sts, st), append(rows, l.rows[i])
		}
	}
	return sts, rows
}

// The Tracer sees each claim, with its topic, limit and rows, and the
// batched statements of outcomes, once per statement.
func TestTracerSeesStatements(t *testing.T) {
	t.Parallel()
	log := &statementLog{}
	sub, driver, msgs := subscribeToEndlessBacklog(t, SubscriberConfig{BatchSize: 3, ColdQueueCapacity: 3, WorkerCount: 3, Tracer: log})
	for range 3 {
		receive(t, msgs, "a message").Ack()
	}
	require.NoError(t, closeOnClock(t, sub, driver.clock))

	claims, claimed := log.of(OperationClaim)
	require.NotEmpty(t, claims)
	require.Equal(t, Statement{Operation: OperationClaim, Topic: "orders", Events: 3}, claims[0])
	require.Equal(t, 3, claimed[0])
	done, _ := log.of(OperationMarkDone)
	var events int
	for _, st := range done {
		require.Empty(t, st.Topic)
		events += st.Events
	}
	require.Equal(t, 3, events, "the DONE events, in batches")
	require.Less(t, len(done), 3+1)
}

// Outcome tells what a Nack with the handler's error records.
func TestOutcome(t *testing.T) {
	t.Parallel()
	sub, driver, msgs := subscribeToEndlessBacklog(t, SubscriberConfig{BatchSize: 1, ColdQueueCapacity: 1, WorkerCount: 1,
		RetryPolicy: outbox.Backoff{MaxAttempts: 2}})
	msg := receive(t, msgs, "a message")
	require.Equal(t, "1", msg.Metadata.Get(MetadataAttempt))
	failed := errors.New("down")
	for _, tt := range []struct {
		err  error
		want outbox.Status
	}{
		{nil, outbox.StatusDone},
		{failed, outbox.StatusRetry},
		{outbox.Permanent(failed), outbox.StatusDead},
		{outbox.RetryAfter(time.Second, failed), outbox.StatusNew},
	} {
		got, ok := Outcome(msg, tt.err)
		require.True(t, ok)
		require.Equal(t, tt.want, got, "%v", tt.err)
	}
	// The last attempt: a failure is DEAD.
	msg.SetContext(&messageContext{Context: msg.Context(), policy: outbox.Backoff{MaxAttempts: 2}, attempt: 2})
	got, _ := Outcome(msg, failed)
	require.Equal(t, outbox.StatusDead, got)
	msg.Ack()
	require.NoError(t, closeOnClock(t, sub, driver.clock))

	_, ok := Outcome(message.NewMessage("u", nil), failed)
	require.False(t, ok, "not delivered by a Subscriber")
}
