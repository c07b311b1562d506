package postgres_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
}

// Constructors and migrations refuse a database that is not there, a nil pool in the DB
// interface included, instead of panicking at first use.
func TestConstructorsNeedADatabase(t *testing.T) {
	t.Parallel()
	var noPool *pgxpool.Pool
	for name, construct := range map[string]func() error{
		"NewStore(nil)":            func() error { _, err := postgres.NewStore(nil, postgres.Config{}); return err },
		"NewStore(nil pool)":       func() error { _, err := postgres.NewStore(noPool, postgres.Config{}); return err },
		"NewNotifier(nil)":         func() error { _, err := postgres.NewNotifier(nil, postgres.Config{}); return err },
		"NewNotifier(nil pool)":    func() error { _, err := postgres.NewNotifier(noPool, postgres.Config{}); return err },
		"Listen(nil pool)":         func() error { _, err := postgres.Listen(nil, postgres.Config{}, func(...string) {}); return err },
		"Listen(no wake function)": func() error { _, err := postgres.Listen(&pgxpool.Pool{}, postgres.Config{}, nil); return err },
		"Migrate(nil pool)":        func() error { return postgres.Migrate(t.Context(), noPool, postgres.Config{}) },
		"MigrateTx(nil)":           func() error { return postgres.MigrateTx(t.Context(), nil, postgres.Config{}) },
	} {
		require.ErrorIs(t, construct(), outbox.ErrInvalidRequest, name)
	}
}

// A notifier sends in transactions of its own, after the writers' commits.
func TestNotifierRefusesATransaction(t *testing.T) {
	t.Parallel()
	tx, err := testdb.New(t).Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = postgres.NewNotifier(tx, postgres.Config{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
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

// blackHole is a TCP proxy to the test server that can stop forwarding on
// the connections it holds, as a network that drops packets without a
// reset would: the client's socket stays open and hears nothing.
type blackHole struct {
	target  string
	ln      net.Listener
	mu      sync.Mutex
	conns   []*holeConn
	sockets []net.Conn
	drop    bool // connections accepted from now on drop everything
}

type holeConn struct{ dropping atomic.Bool }

func newBlackHole(t *testing.T, target string) *blackHole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h := &blackHole{target: target, ln: ln}
	t.Cleanup(func() {
		_ = ln.Close()
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, c := range h.sockets {
			_ = c.Close()
		}
	})
	go h.accept()
	return h
}

func (h *blackHole) accept() {
	for {
		client, err := h.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", h.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		c := &holeConn{}
		h.mu.Lock()
		c.dropping.Store(h.drop)
		h.conns = append(h.conns, c)
		h.sockets = append(h.sockets, client, server)
		h.mu.Unlock()
		go c.pipe(client, server)
		go c.pipe(server, client)
	}
}

// pipe copies from src to dst until src fails, dropping what it reads
// while c drops.
func (c *holeConn) pipe(src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if c.dropping.Load() {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// dropAll makes every connection, held or to come, drop everything, or
// with false lets connections to come through again.
func (h *blackHole) dropAll(drop bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.drop = drop
	if drop {
		for _, c := range h.conns {
			c.dropping.Store(true)
		}
	}
}

// poolThrough returns a pool like pool whose connections go through h.
func (h *blackHole) poolThrough(t *testing.T, pool *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	config := pool.Config()
	host, port, err := net.SplitHostPort(h.ln.Addr().String())
	require.NoError(t, err)
	config.ConnConfig.Host = host
	p, err := strconv.ParseUint(port, 10, 16)
	require.NoError(t, err)
	config.ConnConfig.Port = uint16(p)
	config.ConnConfig.Fallbacks = nil
	config.ConnConfig.ConnectTimeout = 0 // the listener's own bound applies
	through, err := pgxpool.NewWithConfig(t.Context(), config)
	require.NoError(t, err)
	t.Cleanup(through.Close)
	return through
}

// A connection that goes silent, the server or the network gone without a
// reset, is found by the listener's check of a quiet connection, and a
// connection attempt that hears nothing gives up: the listener reconnects
// instead of waiting for TCP keepalives, or for ever.
func TestListenerLeavesASilentConnection(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	hole := newBlackHole(t, net.JoinHostPort(pool.Config().ConnConfig.Host, strconv.Itoa(int(pool.Config().ConnConfig.Port))))
	hole.dropAll(true)
	woken := make(wakeups, 16)
	listener, err := postgres.ListenChecked(hole.poolThrough(t, pool), postgres.Config{}, woken.wake, 200*time.Millisecond, 300*time.Millisecond)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, listener.Close()) })
	time.Sleep(time.Second) // the first attempts hear nothing
	hole.dropAll(false)
	require.Equal(t, "*", woken.next(t), "connected once attempts were answered")

	hole.dropAll(true)
	time.Sleep(time.Second)
	hole.dropAll(false)
	require.Equal(t, "*", woken.next(t), "reconnected after the connection went silent")
	notifier, err := postgres.NewNotifier(pool, postgres.Config{})
	require.NoError(t, err)
	notifier.Notify([]string{"orders"})
	require.NoError(t, notifier.Close())
	require.Equal(t, "orders", woken.next(t))
}
