package middleware_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	wmmw "github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// slowRetries keeps a failed event in RETRY for the whole test.
var slowRetries = watermilladapter.SubscriberConfig{RetryPolicy: outbox.Backoff{Base: time.Hour, NoJitter: true}}

// onlyEvent waits for the only event of the table to leave NEW and
// returns it.
func onlyEvent(t *testing.T, pool *pgxpool.Pool, store *postgres.Store) outbox.Event {
	t.Helper()
	var e outbox.Event
	relaytest.Eventually(t, "the delivery's outcome", func() bool {
		var id string
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT event_id FROM outbox_event`).Scan(&id))
		var err error
		e, err = store.Get(t.Context(), id)
		require.NoError(t, err)
		return e.Status != outbox.StatusNew
	})
	return e
}

// Watermill's router recovers a panicking handler by itself and nacks the
// message; RecordErrors, which the panic passes through, must still leave
// a last_error that says what happened, not one that blames a missing
// RecordErrors.
func TestRecordErrorsRecordsAPanic(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	r := relaytest.Start(t, pool, slowRetries, relaytest.Handlers{"orders": func(*message.Message) error {
		panic("nil map in the consumer")
	}})
	r.Publish(t, "orders", message.NewMessage(watermill.NewUUID(), []byte("x")))
	e := onlyEvent(t, pool, r.Store)
	require.Equal(t, outbox.StatusRetry, e.Status)
	require.Equal(t, 1, e.Attempts)
	require.Equal(t, outboxmw.ErrPanicked.Error()+": nil map in the consumer", e.LastError)
}

// refusingPublisher is a router's publisher whose broker is down.
type refusingPublisher struct{}

func (refusingPublisher) Publish(string, ...*message.Message) error {
	return errors.New("broker unreachable")
}

func (refusingPublisher) Close() error { return nil }

// A handler that returns no error is nacked all the same when the router
// cannot publish the messages it produced. RecordErrors saw no error then:
// last_error must neither blame a missing RecordErrors nor keep an error
// that an earlier try of the same delivery returned (Watermill's Retry
// outside RecordErrors), which made the event DEAD.
func TestRecordErrorsNackAfterHandlerSuccess(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		mw        []message.HandlerMiddleware
		firstFail error // what the first try returns
	}{
		"RecordErrors outermost": {mw: []message.HandlerMiddleware{outboxmw.RecordErrors}},
		"Retry outside RecordErrors": {
			mw: []message.HandlerMiddleware{
				wmmw.Retry{MaxRetries: 1, InitialInterval: time.Millisecond}.Middleware,
				outboxmw.RecordErrors,
			},
			firstFail: outbox.Permanent(errors.New("schema not loaded yet")),
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := testdb.New(t)
			r := relaytest.Start(t, pool, slowRetries, nil)
			router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
			require.NoError(t, err)
			router.AddMiddleware(tc.mw...)
			var tries atomic.Int32
			router.AddHandler("translate", "orders", r.Sub, "orders-out", refusingPublisher{},
				func(msg *message.Message) ([]*message.Message, error) {
					if tries.Add(1) == 1 && tc.firstFail != nil {
						return nil, tc.firstFail
					}
					return []*message.Message{message.NewMessage(watermill.NewUUID(), msg.Payload)}, nil
				})
			relaytest.RunRouter(t, router)

			r.Publish(t, "orders", message.NewMessage(watermill.NewUUID(), []byte("x")))
			e := onlyEvent(t, pool, r.Store)
			require.Equal(t, outbox.StatusRetry, e.Status, "last_error %q", e.LastError)
			require.Equal(t, 1, e.Attempts)
			require.Equal(t, outboxmw.ErrNackedAfterSuccess.Error(), e.LastError)
		})
	}
}
