package designs_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outboxtest"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// docs/coming-from.md, "NEW / DONE / RETRY / DEAD: the Java outbox
// framework": their defaults are a zero SubscriberConfig's, their
// after-commit hook is the writer's hot path, their interceptors run in
// the same order, their status codes are ours, and their operator SQL runs
// on our table unchanged.

// Their settings table, row by row: the defaults a zero SubscriberConfig
// takes.
func TestJavaOutboxDefaults(t *testing.T) {
	t.Parallel()
	require.Equal(t, 4, watermilladapter.DefaultWorkerCount)
	require.Equal(t, 1000, watermilladapter.DefaultHotQueueCapacity)
	require.Equal(t, 1000, watermilladapter.DefaultColdQueueCapacity)
	require.Equal(t, 5*time.Second, watermilladapter.DefaultDrainTimeout)
	require.Equal(t, 50, watermilladapter.DefaultBatchSize)
	require.Equal(t, 5*time.Second, watermilladapter.DefaultPollInterval)
	require.Equal(t, 5*time.Minute, watermilladapter.DefaultLockTimeout)

	// ExponentialBackoffRetryPolicy(200, 60_000) and maxAttempts 10: the
	// zero Backoff's.
	var zero outbox.Backoff
	for attempts := 1; attempts < 10; attempts++ {
		wait, ok := zero.NextRetry(attempts)
		require.True(t, ok, "attempt %d", attempts)
		base := min(60*time.Second, 200*time.Millisecond<<(attempts-1))
		require.GreaterOrEqual(t, wait, base/2, "attempt %d", attempts) // the jitter: 0.5 to 1.5
		require.Less(t, wait, base*3/2, "attempt %d", attempts)
	}
	_, ok := zero.NextRetry(10)
	require.False(t, ok, "DEAD at the tenth failure")
	capped, ok := outbox.Backoff{MaxAttempts: 20, NoJitter: true}.NextRetry(12)
	require.True(t, ok)
	require.Equal(t, 60*time.Second, capped, "capped at 60 s")

	// A relay with a zero config, but for the test's clock, and a tracer
	// to see its claims.
	claims := &claimTracer{}
	var (
		mu      sync.Mutex
		sources = map[string]string{} // event id → MetadataSource
	)
	clock := outboxtest.NewClock(time.Now())
	r := startRelay(t, clock, watermilladapter.SubscriberConfig{Tracer: claims}, map[string]message.NoPublishHandlerFunc{
		"orders": func(msg *message.Message) error {
			mu.Lock()
			defer mu.Unlock()
			sources[msg.Metadata.Get(watermilladapter.MetadataEventID)] = msg.Metadata.Get(watermilladapter.MetadataSource)
			if msg.Metadata.Get(watermilladapter.MetadataEventType) == "OrderFailed" {
				return errors.New("listener failed")
			}
			return nil
		},
	})
	source := func(id string) string {
		mu.Lock()
		defer mu.Unlock()
		return sources[id]
	}

	// lockTimeout: the lease of what the relay claims.
	owner, lease := r.sub.HotLease()
	require.Equal(t, r.sub.Owner(), owner)
	require.Equal(t, 5*time.Minute, lease)
	// intervalMs: after its first claim, the poller waits 5 s.
	require.True(t, clock.WaitForTimer(5*time.Second, waitLimit), "no poll of 5 s; the clock's timers: %v", clock.Armed())

	// The after-commit hook: an event written in store.InTx by a writer
	// whose HotPath is the relay goes out from the hot path.
	created := outbox.NewJSON("OrderCreated", []byte(`{}`))
	created.Topic = "orders"
	hot := r.write(t, created)[0]
	r.drain(t)
	require.Equal(t, watermilladapter.SourceHot, source(hot))
	require.Equal(t, outbox.StatusDone, r.get(t, hot).Status)

	// batchSize 50 and skipRecent 0: what the hot path missed is claimed
	// at the next poll, however recent, 50 at most per claim.
	events := make([]outbox.Envelope, 120)
	for i := range events {
		events[i] = created
	}
	cold := r.writeCold(t, events...)
	clock.Advance(5 * time.Second)
	r.drain(t)
	for _, id := range cold {
		require.Equal(t, watermilladapter.SourceCold, source(id))
		require.Equal(t, outbox.StatusDone, r.get(t, id).Status)
	}
	limits, rows := claims.claims()
	most := 0
	for i := range limits {
		require.Equal(t, 50, limits[i], "claim %d", i)
		most = max(most, rows[i])
	}
	require.Equal(t, 50, most)

	// The default retry policy: the first retry 100 to 300 ms on.
	failing := outbox.NewJSON("OrderFailed", []byte(`{}`))
	failing.Topic = "orders"
	id := r.write(t, failing)[0]
	r.drain(t)
	e := r.get(t, id)
	require.Equal(t, outbox.StatusRetry, e.Status)
	require.Equal(t, 1, e.Attempts)
	wait := e.AvailableAt.Sub(clock.Now())
	require.GreaterOrEqual(t, wait, 100*time.Millisecond)
	require.Less(t, wait, 300*time.Millisecond)
}

// beforeDispatch in registration order, afterDispatch in reverse, and a
// failing beforeDispatch fails the delivery like a listener error.
func TestJavaOutboxInterceptors(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		trace []string
	)
	log := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		trace = append(trace, s)
	}
	interceptor := func(name string) outboxmw.Interceptor {
		return outboxmw.Interceptor{
			Before: func(msg *message.Message) error {
				log("before " + name)
				if msg.Metadata.Get(watermilladapter.MetadataEventType) == "Refused" && name == "tenant" {
					return errors.New("tenant check refuses")
				}
				return nil
			},
			After: func(_ *message.Message, err error) { log(fmt.Sprintf("after %s: %v", name, err)) },
		}
	}
	clock := outboxtest.NewClock(time.Now())
	r := startRelay(t, clock, watermilladapter.SubscriberConfig{}, map[string]message.NoPublishHandlerFunc{
		"orders": func(*message.Message) error {
			log("listener")
			return nil
		},
	}, outboxmw.Intercept(slog.New(slog.DiscardHandler), interceptor("audit"), interceptor("tenant")))

	ok := outbox.NewJSON("Accepted", []byte(`{}`))
	ok.Topic = "orders"
	r.write(t, ok)
	r.drain(t)
	mu.Lock()
	require.Equal(t, []string{
		"before audit", "before tenant", "listener", "after tenant: <nil>", "after audit: <nil>",
	}, trace)
	trace = nil
	mu.Unlock()

	refused := outbox.NewJSON("Refused", []byte(`{}`))
	refused.Topic = "orders"
	id := r.write(t, refused)[0]
	r.drain(t)
	mu.Lock()
	require.Len(t, trace, 4)
	require.Equal(t, []string{"before audit", "before tenant"}, trace[:2])
	require.True(t, strings.HasPrefix(trace[2], "after tenant: "), trace[2])
	require.True(t, strings.HasPrefix(trace[3], "after audit: "), trace[3])
	mu.Unlock()
	e := r.get(t, id)
	require.Equal(t, outbox.StatusRetry, e.Status)
	require.Contains(t, e.LastError, "tenant check refuses")
}

// Their status codes are ours, and their operator SQL runs on our table
// as it is (with pgx's placeholder for JDBC's).
func TestJavaOutboxStatusCodesAndSQL(t *testing.T) {
	t.Parallel()
	require.EqualValues(t, 0, outbox.StatusNew)
	require.EqualValues(t, 1, outbox.StatusDone)
	require.EqualValues(t, 2, outbox.StatusRetry)
	require.EqualValues(t, 3, outbox.StatusDead)

	clock := outboxtest.NewClock(time.Now())
	r := startRelay(t, clock, watermilladapter.SubscriberConfig{}, map[string]message.NoPublishHandlerFunc{
		"orders": func(msg *message.Message) error {
			switch msg.Metadata.Get(watermilladapter.MetadataEventType) {
			case "Retried":
				return errors.New("listener failed")
			case "Dead":
				return outbox.Permanent(errors.New("listener rejects it"))
			}
			return nil
		},
	})
	event := func(eventType string, deliverAfter time.Duration) outbox.Envelope {
		e := outbox.NewJSON(outbox.EventType(eventType), []byte(`{}`))
		e.Topic = "orders"
		if deliverAfter > 0 {
			e.DeliverAfter = clock.Now().Add(deliverAfter)
		}
		return e
	}
	ids := r.write(t, event("Done", 0), event("Retried", 0), event("Dead", 0), event("Later", time.Hour))
	done, retried, dead, later := ids[0], ids[1], ids[2], ids[3]
	r.drain(t)
	for id, want := range map[string]outbox.Status{done: outbox.StatusDone, retried: outbox.StatusRetry, dead: outbox.StatusDead, later: outbox.StatusNew} {
		require.Equal(t, int64(want), r.count(t, `SELECT status FROM outbox_event WHERE event_id = $1`, id))
	}

	due := strings.Replace(`SELECT * FROM outbox_event WHERE status IN (0, 2) AND available_at <= ?`, "?", "$1", 1)
	require.Empty(t, r.ids(t, due, clock.Now()), "the retry and the later event are not due yet")
	require.Equal(t, []string{retried}, r.ids(t, due, clock.Now().Add(time.Minute)))
	require.ElementsMatch(t, []string{retried, later}, r.ids(t, due, clock.Now().Add(2*time.Hour)))
	require.Equal(t, []string{dead}, r.ids(t, `SELECT * FROM outbox_event WHERE status = 3`))
}
