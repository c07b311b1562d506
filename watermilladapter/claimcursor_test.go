package watermilladapter

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// endlessBacklog is a driver whose claims always come back full, as a
// backlog larger than any drain does; it records, for each claim, whether
// it started from the earliest due event (no position to start after).
type endlessBacklog struct {
	instantDriver
	clock *clocktest.Clock

	mu        sync.Mutex
	next      int
	fromStart []bool
}

func (d *endlessBacklog) Claim(_ context.Context, p *outboxdriver.ClaimParams) ([]outboxdriver.Row, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fromStart = append(d.fromStart, p.After == nil)
	rows := make([]outboxdriver.Row, p.Limit)
	for i := range rows {
		d.next++
		rows[i] = orderRow(eventID(d.next), p.LockedUntil)
		rows[i].AvailableAt = d.clock.Now()
	}
	return rows, nil
}

func (d *endlessBacklog) claims() []bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.fromStart)
}

// subscribeToEndlessBacklog subscribes to "orders" with a subscriber of
// cfg on an endless backlog, on a test clock, with polling left to the
// claims; the subscriber is closed at cleanup.
func subscribeToEndlessBacklog(t *testing.T, cfg SubscriberConfig) (*Subscriber, *endlessBacklog, <-chan *message.Message) {
	t.Helper()
	driver := &endlessBacklog{clock: clocktest.New(testStart)}
	cfg.Clock, cfg.PollInterval, cfg.BacklogInterval = driver.clock, time.Hour, time.Hour
	sub, msgs := subscribeOrders(t, driver, cfg)
	return sub, driver, msgs
}

// Under a backlog that never ends, claims follow their cursor, and start
// from the earliest due event again once claimRescan has passed: events
// that became due behind the cursor are not left there for good.
func TestClaimsStartAgainFromTheEarliestDueEventEverySecond(t *testing.T) {
	t.Parallel()
	_, driver, msgs := subscribeToEndlessBacklog(t, SubscriberConfig{BatchSize: 10, ColdQueueCapacity: 20, WorkerCount: 1})
	// ackUntil acks messages until the driver has seen n claims.
	ackUntil := func(n int) []bool {
		deadline := time.After(waitLimit)
		for {
			if claims := driver.claims(); len(claims) >= n {
				return claims
			}
			select {
			case msg := <-msgs:
				msg.Ack()
			case <-deadline:
				t.Fatalf("%d claims, want %d", len(driver.claims()), n)
			}
		}
	}

	claims := ackUntil(5)
	require.True(t, claims[0], "the first claim starts from the earliest due event")
	require.NotContains(t, claims[1:5], true, "a claim started from the earliest due event within the first second: %v", claims)
	driver.clock.Advance(claimRescan)
	before := len(driver.claims())
	claims = ackUntil(before + 3)
	require.Contains(t, claims[before:], true, "no claim started from the earliest due event after %s of backlog: %v", claimRescan, claims)
}
