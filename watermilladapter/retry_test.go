package watermilladapter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// Failed deliveries come back when due: deferrals, retries, and retries
// whose outcome statement was sent twice.

func TestRetryAfterKeepsAttempts(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	got := newReceived()
	const delay = 5 * time.Second
	var (
		once       sync.Once
		deferredAt time.Time
	)
	r := relaytest.StartOnClock(t, pool, clock, watermilladapter.SubscriberConfig{PollInterval: time.Hour},
		relaytest.Handlers{"orders": func(msg *message.Message) error {
			var err error
			once.Do(func() {
				deferredAt = clock.Now()
				err = outbox.RetryAfter(delay, errors.New("rate limited"))
			})
			if err != nil {
				return err
			}
			return got.handler(msg)
		}})
	r.Publish(t, "orders", newMsg("x"))
	msg := nextMessageOnClock(t, clock, 100*time.Millisecond, got.ch, "the deferred event, delivered again")
	require.False(t, clock.Now().Before(deferredAt.Add(delay)), "delivered again before the delay")
	require.Equal(t, "1", msg.Metadata.Get(watermilladapter.MetadataAttempt), "no attempt spent")
	require.Equal(t, watermilladapter.SourceCold, msg.Metadata.Get(watermilladapter.MetadataSource))
	advanceUntilDone(t, clock, pool, 1)
	e := eventStatus(t, r.Store, msg)
	require.Zero(t, e.Attempts)
	require.Contains(t, e.LastError, "rate limited")
}

// A handler's FailRetryAfter spends the attempt and has the event
// delivered again after the delay it asked for, by the relay's clock,
// rather than after the policy's hour; on the last attempt it is DEAD.
func TestFailRetryAfterSpendsAnAttempt(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	const delay = 5 * time.Second
	type call struct {
		attempt string
		at      time.Time
	}
	calls := make(chan call, 2)
	r := relaytest.StartOnClock(t, pool, clock, watermilladapter.SubscriberConfig{PollInterval: time.Hour,
		RetryPolicy: outbox.Backoff{Base: time.Hour, MaxAttempts: 2, NoJitter: true}},
		relaytest.Handlers{"orders": func(msg *message.Message) error {
			calls <- call{msg.Metadata.Get(watermilladapter.MetadataAttempt), clock.Now()}
			return outbox.FailRetryAfter(delay, errors.New("downstream: HTTP 429"))
		}})
	r.Publish(t, "orders", newMsg("x"))
	id := onlyEventID(t, pool)
	first := <-calls
	require.Equal(t, "1", first.attempt)
	relaytest.AdvanceUntil(t, clock, watermilladapter.SettleLinger, "RETRY recorded", func() bool {
		return statusOf(t, r.Store, id).Status == outbox.StatusRetry
	})
	e := statusOf(t, r.Store, id)
	require.Equal(t, 1, e.Attempts, "the attempt is spent")
	require.Equal(t, "failed, retry after 5s: downstream: HTTP 429", e.LastError)
	require.False(t, e.AvailableAt.Before(first.at.Add(delay)), "due at %v", e.AvailableAt)
	require.False(t, e.AvailableAt.After(clock.Now().Add(delay)), "due at %v, not after the delay asked for", e.AvailableAt)

	relaytest.AdvanceUntil(t, clock, watermilladapter.SettleLinger, "DEAD after the last attempt", func() bool {
		return statusOf(t, r.Store, id).Status == outbox.StatusDead
	})
	second := <-calls
	require.Equal(t, "2", second.attempt)
	require.False(t, second.at.Before(e.AvailableAt), "delivered again before its time")
	require.Less(t, second.at.Sub(testStart), time.Hour, "delivered again at the policy's delay, not the one asked for")
	require.Equal(t, 2, statusOf(t, r.Store, id).Attempts)
}

// Retries do not wait for a poll (an hour here): neither one due before
// the settler has recorded it (the claim its wake-up brings must come
// after the record, or it finds the event still held), nor one due after
// another retry of the subscription (each retry time is kept, not only the
// earliest).
func TestRetriesAreClaimedWhenDueNotAtThePoll(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	delays := map[string]time.Duration{"soon": time.Millisecond, "first": 200 * time.Millisecond, "second": 600 * time.Millisecond}
	var mu sync.Mutex
	tries := map[string]int{}
	redelivered := make(chan string, len(delays))
	r := relaytest.StartOnClock(t, pool, clock, watermilladapter.SubscriberConfig{PollInterval: time.Hour},
		relaytest.Handlers{"orders": func(msg *message.Message) error {
			name := string(msg.Payload)
			mu.Lock()
			tries[name]++
			first := tries[name] == 1
			mu.Unlock()
			if first {
				return outbox.RetryAfter(delays[name], errors.New("not yet"))
			}
			redelivered <- name
			return nil
		}})
	for name := range delays {
		r.Publish(t, "orders", newMsg(name))
	}
	got := map[string]bool{}
	relaytest.AdvanceUntil(t, clock, watermilladapter.SettleLinger, "every retry redelivered", func() bool {
		for {
			select {
			case name := <-redelivered:
				got[name] = true
			default:
				return len(got) == len(delays)
			}
		}
	})
	require.Less(t, clock.Now().Sub(testStart), time.Hour, "redelivered at the poll")
}

// replyLost is a driver whose first RETRY batch commits on the server but
// reaches the relay as an error, as when the connection dies between the
// commit and its reply; the error comes once ready is closed. It counts
// the RETRY batches the server took.
type replyLost struct {
	outboxdriver.Driver[pgx.Tx]
	lost  atomic.Bool
	ready chan struct{}
	sent  atomic.Int64
}

func (d *replyLost) RecordOutcomes(ctx context.Context, p outboxdriver.RecordOutcomesParams) (int64, error) {
	n, err := d.Driver.RecordOutcomes(ctx, p)
	if err == nil && len(p.Outcomes) > 0 && p.Outcomes[0].Status == int16(outbox.StatusRetry) {
		d.sent.Add(1)
		if d.lost.CompareAndSwap(false, true) {
			<-d.ready
			return 0, errors.New("read tcp: connection reset by peer")
		}
	}
	return n, err
}

// The relay sends a failed outcome statement again. When the first had
// committed (its reply lost) and the relay has claimed the event again
// since, the RETRY sent again must not count a second attempt for one
// Nack, nor end the new claim under the handler now holding the event,
// which would let another relay deliver it at the same time.
func TestRetrySentAgainAfterALostReplyCountsOnce(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	base := storeWithBacklog(t, pool, clock, 1)
	lost := &replyLost{Driver: base.Driver(), ready: make(chan struct{})}
	const poll = 50 * time.Millisecond
	newRelay := func(driver outboxdriver.Driver[pgx.Tx], owner string) <-chan *message.Message {
		_, msgs := subscribe(t, storeOn(t, driver, clock), watermilladapter.SubscriberConfig{Owner: owner, PollInterval: poll,
			Clock: clock, RetryPolicy: outbox.Backoff{Base: 10 * time.Millisecond, Max: 10 * time.Millisecond, MaxAttempts: 100}}, "orders")
		return msgs
	}

	a := newRelay(lost, "a")
	first := nextMessage(t, a, "first delivery")
	id := first.Metadata.Get(watermilladapter.MetadataEventID)
	first.Nack() // the RETRY commits; its reply waits for ready
	second := nextMessageOnClock(t, clock, poll/5, a, "the retry, claimed again by relay a")
	require.Equal(t, id, second.Metadata.Get(watermilladapter.MetadataEventID))
	claimsOfB := &claimRecorder{Driver: base.Driver()}
	b := newRelay(claimsOfB, "b")
	close(lost.ready) // the reply is lost; relay a sends the RETRY again
	relaytest.AdvanceUntil(t, clock, poll/5, "the RETRY sent again", func() bool { return lost.sent.Load() == 2 })

	for i := range 5 { // polls of relay b while relay a's handler holds the event
		claims := len(claimsOfB.recorded())
		relaytest.AdvanceUntil(t, clock, poll/5, fmt.Sprint("poll ", i+1, " of relay b"), func() bool {
			return len(claimsOfB.recorded()) > claims
		})
	}
	for _, c := range claimsOfB.recorded() {
		require.Empty(t, c.rows, "relay b claimed the event while relay a's handler holds it")
	}
	noMessage(t, b, "relay b delivered the event while relay a's handler holds it")
	e := statusOf(t, base, id)
	require.Equal(t, 1, e.Attempts, "one Nack, one attempt")
	require.Equal(t, "a", e.LockedBy, "relay a's new claim holds")
	second.Ack()
}
