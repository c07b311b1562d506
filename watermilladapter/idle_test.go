package watermilladapter_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// WaitIdle: a test waits for the relay to settle every due event instead
// of sleeping.

// waitIdle runs WaitIdle for at most limit.
func waitIdle(t *testing.T, sub *watermilladapter.Subscriber, limit time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	return sub.WaitIdle(ctx)
}

// WaitIdle does not return while a handler holds an event, says which
// topic is busy when it gives up, and returns once the event's DONE is
// recorded.
func TestWaitIdleWaitsForHandlersAndOutcomes(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	release := make(chan struct{})
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{PollInterval: time.Hour},
		relaytest.Handlers{"orders": func(*message.Message) error {
			<-release
			return nil
		}})
	r.Publish(t, "orders", newMsg("slow"))

	err := waitIdle(t, r.Sub, 300*time.Millisecond)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, `topic "orders": 1 pending`)

	close(release)
	require.NoError(t, waitIdle(t, r.Sub, relaytest.WaitLimit))
	require.Equal(t, 1, doneCount(t, pool), "idle once the DONE is recorded")
}

// Events committed in a transaction the relay was not told of are claimed
// at once, not at the next poll (an hour here).
func TestWaitIdleClaimsEventsItWasNotToldOf(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	var handled atomic.Int32
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{PollInterval: time.Hour},
		relaytest.Handlers{"orders": func(*message.Message) error {
			handled.Add(1)
			return nil
		}})
	writeCold(t, r.Store, orderEvent("a"), orderEvent("b"))
	require.NoError(t, waitIdle(t, r.Sub, relaytest.WaitLimit))
	require.EqualValues(t, 2, handled.Load())
	require.Equal(t, 2, doneCount(t, pool))
}

// A retry not due yet leaves the relay idle; once the clock passes it,
// WaitIdle waits for its delivery. Nothing waits for the settler's linger
// on a clock that stands still.
func TestWaitIdleOnATestClock(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	clock := clocktest.New(testStart)
	const backoff = 10 * time.Second
	var tries atomic.Int32
	r := relaytest.StartOnClock(t, pool, clock, watermilladapter.SubscriberConfig{
		PollInterval: time.Hour,
		RetryPolicy:  outbox.Backoff{Base: backoff, NoJitter: true},
	}, relaytest.Handlers{"orders": func(*message.Message) error {
		if tries.Add(1) == 1 {
			return errors.New("downstream unavailable")
		}
		return nil
	}})
	r.Publish(t, "orders", newMsg("x"))
	id := onlyEventID(t, pool)

	require.NoError(t, waitIdle(t, r.Sub, relaytest.WaitLimit))
	e := statusOf(t, r.Store, id)
	require.Equal(t, outbox.StatusRetry, e.Status, "idle with the retry not due")
	require.Equal(t, 1, e.Attempts)

	clock.Advance(backoff)
	require.NoError(t, waitIdle(t, r.Sub, relaytest.WaitLimit))
	require.Equal(t, outbox.StatusDone, statusOf(t, r.Store, id).Status)
	require.EqualValues(t, 2, tries.Load())
}

// A subscriber with no subscription is not idle yet (a test that waits
// before its router runs would pass for nothing); a closed one says so.
func TestWaitIdleWithoutSubscriptionAndAfterClose(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, nil)
	err := waitIdle(t, r.Sub, 50*time.Millisecond)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "serves no topic")

	require.NoError(t, r.Sub.Close())
	require.ErrorIs(t, waitIdle(t, r.Sub, relaytest.WaitLimit), watermilladapter.ErrSubscriberClosed)
}
