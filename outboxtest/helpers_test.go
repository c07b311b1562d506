package outboxtest_test

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// The kit's tests run on SQLite, and the parts that read the table on
// PostgreSQL and MySQL too. What a failing assertion does is checked with
// recordingT, which records failures instead of failing the test.

// waitLimit bounds the waits of the tests that must not time out.
const waitLimit = 20 * time.Second

// newSQLiteStore returns a store on a fresh in-memory SQLite database,
// on clock (nil: the system clock).
func newSQLiteStore(t *testing.T, clock outbox.Clock) *sqlite.Store {
	t.Helper()
	store, _ := newSQLite(t, clock)
	return store
}

// newSQLite is newSQLiteStore, with the store's database.
func newSQLite(t *testing.T, clock outbox.Clock) (*sqlite.Store, *sql.DB) {
	t.Helper()
	db, err := sqlite.Open(t.Context(), sqlite.Memory)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	require.NoError(t, sqlite.Migrate(t.Context(), db, sqlite.Config{}))
	store, err := sqlite.NewStore(db, sqlite.Config{Clock: clock})
	require.NoError(t, err)
	return store, db
}

// recordingT is a testing.TB whose failures are recorded, not reported:
// Fatalf ends the goroutine, as it does, so run calls the code under test
// in a goroutine of its own.
type recordingT struct {
	testing.TB // the real test: its Context, Cleanup, TempDir

	mu       sync.Mutex
	failures []string
}

func newRecordingT(t *testing.T) *recordingT { return &recordingT{TB: t} }

func (r *recordingT) Helper() {}

func (r *recordingT) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *recordingT) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recordingT) Fatal(args ...any) {
	r.Errorf("%s", fmt.Sprint(args...))
	runtime.Goexit()
}

func (r *recordingT) FailNow() { runtime.Goexit() }

// run calls fn with r and returns the failures it recorded, joined.
func (r *recordingT) run(fn func(t testing.TB)) string {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.failures, "\n")
}

// failure runs fn with a recordingT and returns what it failed with,
// failing the test if it did not fail.
func failure(t *testing.T, fn func(t testing.TB)) string {
	t.Helper()
	msg := newRecordingT(t).run(fn)
	require.NotEmpty(t, msg, "the assertion did not fail")
	return msg
}

// relay is a subscriber with a router handling topic with handler (behind
// middleware.RecordErrors), on store, and a publisher whose hot path it
// is; closed at cleanup.
type relay struct {
	sub *watermilladapter.Subscriber
	pub *watermilladapter.Publisher[*sql.Tx]
}

func startRelay(t *testing.T, store *sqlite.Store, cfg watermilladapter.SubscriberConfig, topic string, handler message.NoPublishHandlerFunc) *relay {
	t.Helper()
	sub, err := watermilladapter.NewSubscriber(store, cfg)
	require.NoError(t, err)
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: sub})
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(outboxmw.RecordErrors) // handler errors recorded as the events' last_error
	router.AddConsumerHandler("handle-"+topic, topic, sub, handler)
	done := make(chan error, 1)
	go func() { done <- router.Run(context.Background()) }()
	t.Cleanup(func() {
		require.NoError(t, router.Close())
		require.NoError(t, <-done)
		require.NoError(t, sub.Close())
	})
	select {
	case <-router.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	}
	return &relay{sub: sub, pub: pub}
}

// publish publishes msgs on topic through the Watermill publisher, in a
// transaction of InTx.
func (r *relay) publish(t *testing.T, store *sqlite.Store, topic string, msgs ...*message.Message) {
	t.Helper()
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, _ *sql.Tx) error {
		for _, m := range msgs {
			m.SetContext(ctx)
		}
		return r.pub.Publish(topic, msgs...)
	}))
}

// write writes events with a writer with no hot path, in a transaction
// of InTx.
func write[Tx any](t *testing.T, store *outbox.Store[Tx], events ...outbox.Envelope) {
	t.Helper()
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
		_, err := writer.Write(ctx, tx, events...)
		return err
	}))
}

// orderCreated is the event the tests look for.
func orderCreated(id string, total int) outbox.Envelope {
	e := outbox.NewJSON("OrderCreated", fmt.Appendf(nil, `{"id": %q, "total": %d, "lines": [{"sku": "A", "qty": 1}]}`, id, total))
	e.Topic, e.AggregateType, e.AggregateID = "orders", "Order", id
	e.Headers = map[string]string{"source": "checkout"}
	return e
}
