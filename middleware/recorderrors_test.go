package middleware_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
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
	require.Equal(t, outboxmw.ErrPanicked.Error(), e.LastError)
}
