package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// wakeups records what a Listener passes to its wake function: "*" for a
// wake-up of every topic.
type wakeups chan string

func (w wakeups) wake(topics ...string) {
	if len(topics) == 0 {
		w <- "*"
	}
	for _, t := range topics {
		w <- t
	}
}

func (w wakeups) next(t *testing.T) string {
	t.Helper()
	select {
	case got := <-w:
		return got
	case <-time.After(20 * time.Second):
		t.Fatal("no wake-up within 20s")
		return ""
	}
}

// listen starts a listener for cfg's table, closed at cleanup, that records
// its wake-ups.
func listen(t *testing.T, pool *pgxpool.Pool, cfg postgres.Config) (wakeups, *postgres.Listener) {
	t.Helper()
	woken := make(wakeups, 16)
	listener, err := postgres.Listen(pool, cfg, woken.wake)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, listener.Close()) })
	return woken, listener
}

func TestNotifierWakesListenersOfItsTableOnly(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)

	woken, _ := listen(t, pool, postgres.Config{})
	other, _ := listen(t, pool, postgres.Config{Table: "other_outbox"})
	require.Equal(t, "*", woken.next(t), "listening: every topic is woken once")
	require.Equal(t, "*", other.next(t))

	notifier, err := postgres.NewNotifier(pool, postgres.Config{})
	require.NoError(t, err)
	notifier.Notify([]string{"orders", "billing"})
	notifier.Notify(nil)
	got := []string{woken.next(t), woken.next(t)}
	require.ElementsMatch(t, []string{"orders", "billing"}, got)
	require.NoError(t, notifier.Close())
	require.NoError(t, notifier.Close(), "idempotent")

	// A notification for the other table reaches its listener alone; by
	// then the first listener would have seen one of its own too.
	otherNotifier, err := postgres.NewNotifier(pool, postgres.Config{Table: "other_outbox"})
	require.NoError(t, err)
	otherNotifier.Notify([]string{"invoices"})
	require.NoError(t, otherNotifier.Close())
	require.Equal(t, "invoices", other.next(t))
	require.Empty(t, woken)
}

// A notifier announces the first commit after a quiet spell at once and
// holds what follows within NotifyInterval, to send it together at the
// interval's end, or at Close.
func TestNotifierPacesNotifications(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	woken, _ := listen(t, pool, postgres.Config{})
	require.Equal(t, "*", woken.next(t))

	notifier, err := postgres.NewNotifier(pool, postgres.Config{NotifyInterval: time.Hour})
	require.NoError(t, err)
	notifier.Notify([]string{"orders"})
	require.Equal(t, "orders", woken.next(t), "the first notification is not held")
	notifier.Notify([]string{"billing"})
	notifier.Notify([]string{"invoices"})
	time.Sleep(500 * time.Millisecond) // an unpaced notifier would have sent them
	require.Empty(t, woken, "held within the interval")
	require.NoError(t, notifier.Close())
	require.ElementsMatch(t, []string{"billing", "invoices"}, []string{woken.next(t), woken.next(t)},
		"sent at Close")
}

func TestNotifierRejectsNegativeInterval(t *testing.T) {
	t.Parallel()
	_, err := postgres.NewNotifier(testdb.New(t), postgres.Config{NotifyInterval: -time.Millisecond})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
}

func TestListenerReconnectsAndWakesEverything(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)

	woken, listener := listen(t, pool, postgres.Config{})
	require.Equal(t, "*", woken.next(t))

	var killed int
	require.NoError(t, pool.QueryRow(t.Context(), `
		SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN %'`).Scan(&killed))
	require.Equal(t, 1, killed)
	require.Equal(t, "*", woken.next(t), "reconnected: whatever was notified meanwhile is claimed")

	notifier, err := postgres.NewNotifier(pool, postgres.Config{})
	require.NoError(t, err)
	notifier.Notify([]string{"orders"})
	require.Equal(t, "orders", woken.next(t))
	require.NoError(t, notifier.Close())
	require.NoError(t, listener.Close())
	require.NoError(t, listener.Close(), "idempotent")
}

func TestChannel(t *testing.T) {
	t.Parallel()

	def, err := postgres.Channel(postgres.Config{})
	require.NoError(t, err)
	require.Equal(t, "wmoutbox.outbox_event", def)
	long, err := postgres.Channel(postgres.Config{Schema: strings.Repeat("s", 63), Table: strings.Repeat("t", 48)})
	require.NoError(t, err)
	require.LessOrEqual(t, len(long), 63, "a channel is an identifier")
	other, err := postgres.Channel(postgres.Config{Schema: strings.Repeat("s", 63), Table: strings.Repeat("u", 48)})
	require.NoError(t, err)
	require.NotEqual(t, long, other)

	_, err = postgres.Channel(postgres.Config{Table: `x"; DROP TABLE outbox_event; --`})
	require.Error(t, err)
	_, err = postgres.NewNotifier(nil, postgres.Config{})
	require.Error(t, err)
	_, err = postgres.Listen(nil, postgres.Config{}, func(...string) {})
	require.Error(t, err)
}

// A pool whose connections hand notifications to a handler of their own
// (ConnConfig.OnNotification, for the application's own LISTEN) does not
// take them from the listener.
func TestListenerOnPoolWithNotificationHandler(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	config := pool.Config()
	config.ConnConfig.OnNotification = func(*pgconn.PgConn, *pgconn.Notification) {}
	handled, err := pgxpool.NewWithConfig(t.Context(), config)
	require.NoError(t, err)
	t.Cleanup(handled.Close)

	woken, _ := listen(t, handled, postgres.Config{})
	require.Equal(t, "*", woken.next(t))
	notifier, err := postgres.NewNotifier(pool, postgres.Config{})
	require.NoError(t, err)
	notifier.Notify([]string{"orders"})
	require.NoError(t, notifier.Close())
	require.Equal(t, "orders", woken.next(t))
}

// The listener connects as the pool does, with what the pool's
// BeforeConnect sets: here the user, as a hook handing out rotating
// credentials would.
func TestListenerConnectsThroughPoolsBeforeConnect(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	config := pool.Config()
	user := config.ConnConfig.User
	config.ConnConfig.User = "wmoutbox_no_such_role"
	config.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		cc.User = user
		return nil
	}
	hooked, err := pgxpool.NewWithConfig(t.Context(), config)
	require.NoError(t, err)
	t.Cleanup(hooked.Close)

	woken, _ := listen(t, hooked, postgres.Config{})
	require.Equal(t, "*", woken.next(t), "connected")
}
