//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

const (
	poisonGood  = 10_000
	poisonTopic = "poison"
)

var errPoison = errors.New("poison: payload rejected by the consumer")

// poisonRetry spends the poison event's attempts quickly: the scenario is
// about its neighbours, not about the backoff.
var poisonRetry = outbox.Backoff{Base: 50 * time.Millisecond, Max: 400 * time.Millisecond, MaxAttempts: 6}

// TestPoisonEvent writes one event that always fails, first, then 10,000
// good ones. The poison event goes DEAD with its error after its attempts;
// the good ones are all delivered once, at the first attempt, while it
// retries. The delivery rate is logged beside that of 10,000 good events
// written before the poison one (no timing is asserted).
func TestPoisonEvent(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	l := newLedger(t, pool, "poison")
	poisonID := outbox.NewID()
	var poisonCalls atomic.Int64
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{
		PollInterval: 50 * time.Millisecond,
		RetryPolicy:  poisonRetry,
	}, relaytest.Handlers{poisonTopic: func(msg *message.Message) error {
		if msg.Metadata.Get(watermilladapter.MetadataEventID) == poisonID {
			poisonCalls.Add(1)
			return errPoison
		}
		return l.handler(msg)
	}})

	write := writeWithPublisher(r.Store, r.Pub, poisonTopic, nil)
	ctx := t.Context()
	writeGood := func() {
		const perTx = 100
		for range poisonGood / perTx {
			ids := make([]string, perTx)
			for i := range ids {
				ids[i] = outbox.NewID()
			}
			require.NoError(t, write(ctx, ids, false))
		}
	}
	// The speed without poison, for comparison.
	start := time.Now()
	writeGood()
	l.waitDelivered(t, 60*time.Second)
	baseline := time.Since(start)

	// The poison event is not in the ledger: it is expected DEAD, not
	// delivered. It is written on its own, ahead of the others.
	require.NoError(t, r.Store.InTx(ctx, func(ctx context.Context, _ pgx.Tx) error {
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{"poison":true}`))
		msg.Metadata.Set(watermilladapter.MetadataEventID, poisonID)
		msg.SetContext(ctx)
		return r.Pub.Publish(poisonTopic, msg)
	}))
	start = time.Now()
	writeGood()
	// The good events' time, without the poison event's last retries.
	waitFor(t, "the good events delivered", 60*time.Second, func() (bool, string) {
		f, err := l.count(ctx)
		return err == nil && f.lost == 0, fmt.Sprint(f, err)
	})
	delivered := time.Since(start)
	f := l.waitDelivered(t, 60*time.Second)

	poison, err := r.Store.Get(ctx, poisonID)
	require.NoError(t, err)
	st, err := outboxState(ctx, pool)
	require.NoError(t, err)
	var retried int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox_event WHERE attempts > 0 AND event_id <> $1`, poisonID).Scan(&retried))
	l.report(t, f, 1, 1, fmt.Sprintf("dead=%d poison_attempts=%d rate_with_poison=%.0f/s rate_without=%.0f/s",
		st.dead, poison.Attempts, float64(poisonGood)/delivered.Seconds(), float64(poisonGood)/baseline.Seconds()))

	require.Equal(t, outbox.StatusDead, poison.Status)
	require.Equal(t, poisonRetry.MaxAttempts, poison.Attempts)
	require.Equal(t, int64(poisonRetry.MaxAttempts), poisonCalls.Load(), "delivered once per attempt")
	require.Contains(t, poison.LastError, errPoison.Error())
	require.Equal(t, int64(2*poisonGood), f.events)
	require.Zero(t, f.lost, "lost")
	require.Zero(t, f.duplicates, "duplicates")
	require.Zero(t, f.phantom, "phantom")
	require.Zero(t, retried, "no good event failed or waited for a retry")
	require.Equal(t, int64(2*poisonGood), st.done, "%s", st)
	require.Equal(t, int64(1), st.dead, "%s", st)
}
