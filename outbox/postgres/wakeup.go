package postgres

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wmoutbox/wmoutbox/internal/nilcheck"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// Cross-process wake-up. A relay in another process learns of committed
// events at its next poll; a Notifier in the writing process and a Listener
// in each relay make that immediate.
//
// The Notifier sends NOTIFY after the business transaction has committed,
// from a short transaction of its own, and never more than one at a time
// per process: PostgreSQL serialises the commits of all transactions that
// sent NOTIFY on one lock for the whole server, so a NOTIFY inside every
// business transaction (or a trigger) would queue all writers behind each
// other.
// Topics committed while a notification is on its way, or within
// Config.NotifyInterval of its start, are merged into the next one.

// DefaultNotifyInterval is [Config.NotifyInterval] when it is zero.
const DefaultNotifyInterval = 5 * time.Millisecond

// notifyTimeout bounds one notification.
const notifyTimeout = 5 * time.Second

// Listener reconnects after listenRetry, doubling up to listenRetryMax.
const (
	listenRetry    = 100 * time.Millisecond
	listenRetryMax = 5 * time.Second
)

// listenTiming bounds how long a Listener trusts a connection: it checks
// one that has been quiet for check, and gives up on a check or a
// connection attempt (when the pool's config sets no connect_timeout)
// unanswered for checkTimeout or connectTimeout. Without them a server or
// network gone without a reset leaves the listener deaf until TCP
// keepalive notices, or for ever on a connection whose peer still
// acknowledges packets.
type listenTiming struct {
	check, checkTimeout, connectTimeout time.Duration
}

var defaultListenTiming = listenTiming{check: 30 * time.Second, checkTimeout: 10 * time.Second, connectTimeout: 10 * time.Second}

// Channel returns the NOTIFY channel of the outbox table cfg names: one per
// table, so that relays of different outboxes on one database do not wake
// each other. It comes from Schema and Table as written, not from the table
// they resolve to: give a [Notifier] and its [Listener]s the same names (an
// empty Schema and "public" are different channels).
func Channel(cfg Config) (string, error) {
	t, err := newTable(cfg)
	if err != nil {
		return "", err
	}
	return channelFor(cfg.Schema, t.name), nil
}

// channelFor fits the channel into PostgreSQL's 63-byte identifiers.
func channelFor(schema, table string) string {
	name := "wmoutbox." + table
	if schema != "" {
		name = "wmoutbox." + schema + "." + table
	}
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "wmoutbox." + hex.EncodeToString(sum[:16])
}

// Notifier wakes the relays of other processes when events are committed.
// Hand its Notify to the publisher (watermilladapter's
// PublisherConfig.Notify), or call it from a writer's Committed hook
// (outbox.WriterConfig.Committed, with [outbox.Topics] of the events);
// relays receive it through a [Listener]. It is safe for concurrent use.
type Notifier struct {
	db       DB
	channel  string
	interval time.Duration
	logger   *slog.Logger

	mu      sync.Mutex
	pending map[string]struct{}

	kick      chan struct{}
	quit      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// NewNotifier returns a notifier sending on db (usually the store's pool)
// for the table cfg names. Close it to stop its goroutine.
func NewNotifier(db DB, cfg Config) (*Notifier, error) {
	if nilcheck.Is(db) {
		return nil, fmt.Errorf("%w: postgres notifier needs a database", outbox.ErrInvalidRequest)
	}
	if _, ok := db.(pgx.Tx); ok {
		// It sends after commits, in transactions of its own; in one
		// transaction, PostgreSQL would hold the notifications until its
		// commit, and the notifier's setting would make that commit
		// asynchronous.
		return nil, fmt.Errorf("%w: postgres notifier needs a pool or a connection, not a transaction", outbox.ErrInvalidRequest)
	}
	channel, err := Channel(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.NotifyInterval < 0 {
		return nil, fmt.Errorf("%w: postgres NotifyInterval is negative", outbox.ErrInvalidRequest)
	}
	n := &Notifier{
		db:       db,
		channel:  channel,
		interval: cmp.Or(cfg.NotifyInterval, DefaultNotifyInterval),
		logger:   cmp.Or(cfg.Logger, slog.Default()),
		pending:  make(map[string]struct{}),
		kick:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go n.run()
	return n, nil
}

// Notify asks for the relays of topics to be woken: at once, or with the
// next notification when one was sent less than Config.NotifyInterval
// ago. It never blocks and never fails: a notification that cannot be
// sent is logged, and the relays find the events at their next poll.
func (n *Notifier) Notify(topics []string) {
	if len(topics) == 0 {
		return
	}
	n.mu.Lock()
	for _, t := range topics {
		n.pending[t] = struct{}{}
	}
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// Close sends what is pending and stops. It is idempotent.
func (n *Notifier) Close() error {
	n.closeOnce.Do(func() { close(n.quit) })
	<-n.done
	return nil
}

func (n *Notifier) run() {
	defer close(n.done)
	defer n.send() // what is pending at Close
	for {
		select {
		case <-n.kick:
		case <-n.quit:
			return
		}
		started := time.Now()
		n.send()
		select {
		case <-time.After(n.interval - time.Since(started)):
		case <-n.quit:
			return
		}
	}
}

// send notifies every pending topic in one statement.
func (n *Notifier) send() {
	n.mu.Lock()
	if len(n.pending) == 0 {
		n.mu.Unlock()
		return
	}
	topics := make([]string, 0, len(n.pending))
	for t := range n.pending {
		topics = append(topics, t)
	}
	clear(n.pending)
	n.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
	defer cancel()
	if _, err := n.db.Exec(ctx, sqlNotify, n.channel, topics); err != nil {
		n.logger.Warn("outbox: notify failed; relays will find the events at their next poll",
			"channel", n.channel, "topics", len(topics), "error", err)
	}
}

// Listener holds one connection that LISTENs for a [Notifier]'s
// notifications and passes each topic to wake, usually a Subscriber's Wake.
// After every (re)connection it calls wake with no topic, meaning all:
// notifications sent while it was away are lost, the events are not.
type Listener struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Listen starts a listener on its own connection, opened with pool's
// connection config and BeforeConnect hook (it does not take one of pool's
// connections), for the table cfg names. It reconnects by itself until
// Close.
//
// The connection must be a server session of its own: through a pooler in
// transaction mode (PgBouncer's pool_mode=transaction) the LISTEN ends
// with its transaction and no notification arrives, with no error. Give
// Listen a pool configured to reach the server directly then; a pool
// that is never used opens no connection unless its MinConns asks.
//
// A connection quiet for 30 s is checked with a round trip, and one that
// does not answer within 10 s is replaced, as is a connection attempt
// unanswered for 10 s when the pool's config sets no connect_timeout.
func Listen(pool *pgxpool.Pool, cfg Config, wake func(topics ...string)) (*Listener, error) {
	return listenTimed(pool, cfg, wake, defaultListenTiming)
}

func listenTimed(pool *pgxpool.Pool, cfg Config, wake func(topics ...string), timing listenTiming) (*Listener, error) {
	if pool == nil || wake == nil {
		return nil, fmt.Errorf("%w: postgres listener needs a pool and a wake function", outbox.ErrInvalidRequest)
	}
	channel, err := Channel(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Listener{cancel: cancel, done: make(chan struct{})}
	go l.run(ctx, pool.Config(), channel, wake, timing, cmp.Or(cfg.Logger, slog.Default()))
	return l, nil
}

// Close stops listening and closes the connection. It is idempotent.
func (l *Listener) Close() error {
	l.cancel()
	<-l.done
	return nil
}

func (l *Listener) run(ctx context.Context, poolConfig *pgxpool.Config, channel string, wake func(...string), timing listenTiming, logger *slog.Logger) {
	defer close(l.done)
	pause := listenRetry
	for {
		err := listen(ctx, poolConfig, channel, wake, timing, func() { pause = listenRetry })
		if ctx.Err() != nil {
			return
		}
		logger.Warn("outbox: listener lost its connection; reconnecting", "channel", channel, "pause", pause, "error", err)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return
		}
		pause = min(2*pause, listenRetryMax)
	}
}

// listen connects, listens and passes notifications on until an error or
// a check of the quiet connection goes unanswered.
func listen(ctx context.Context, poolConfig *pgxpool.Config, channel string, wake func(...string), timing listenTiming, connected func()) error {
	conn, err := connect(ctx, poolConfig, timing.connectTimeout)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	listenCtx, cancel := context.WithTimeout(ctx, timing.checkTimeout)
	_, err = conn.Exec(listenCtx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
	cancel()
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	connected()
	wake()
	for {
		waitCtx, cancel := context.WithTimeout(ctx, timing.check)
		notification, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil:
			wake(notification.Payload)
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			if err := ping(ctx, conn, timing.checkTimeout); err != nil {
				return fmt.Errorf("check of a quiet connection: %w", err)
			}
		default:
			return err
		}
	}
}

// ping makes a round trip on conn within timeout.
func ping(ctx context.Context, conn *pgx.Conn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return conn.Ping(ctx)
}

// connect opens a connection with poolConfig's connection config and
// BeforeConnect hook, which may hand out credentials that change over
// time; not its AfterConnect, which prepares connections for queries a
// listener does not run. An attempt takes at most the config's connect
// timeout, or timeout when it has none.
func connect(ctx context.Context, poolConfig *pgxpool.Config, timeout time.Duration) (*pgx.Conn, error) {
	connConfig, err := ownConnConfig(ctx, poolConfig, timeout)
	if err != nil {
		return nil, err
	}
	// The connection keeps notifications for WaitForNotification only when
	// no handler takes them: one set for pool's connections would.
	connConfig.OnNotification = nil
	return pgx.ConnectConfig(ctx, connConfig)
}

// ownConnConfig is the config of a connection of its own that is made
// like poolConfig's: a copy of its connection config, through its
// BeforeConnect hook, with timeout as the connect timeout when it sets
// none.
func ownConnConfig(ctx context.Context, poolConfig *pgxpool.Config, timeout time.Duration) (*pgx.ConnConfig, error) {
	connConfig := poolConfig.ConnConfig.Copy()
	if connConfig.ConnectTimeout == 0 {
		connConfig.ConnectTimeout = timeout
	}
	if poolConfig.BeforeConnect != nil {
		if err := poolConfig.BeforeConnect(ctx, connConfig); err != nil {
			return nil, fmt.Errorf("before connect: %w", err)
		}
	}
	return connConfig, nil
}
