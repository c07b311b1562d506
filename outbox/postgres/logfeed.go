package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/internal/ident"
	"github.com/wmoutbox/wmoutbox/internal/nilcheck"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// Defaults of [LogFeedConfig].
const (
	DefaultStandbyRetry   = 500 * time.Millisecond
	DefaultStatusInterval = time.Second
	DefaultCoveredDelay   = 30 * time.Second
)

// The names a log feed derives from its table's, and their limits.
const (
	slotSuffix        = "_relay"
	publicationSuffix = "_log"
	maxSlotLen        = 63 // NAMEDATALEN - 1, for slots and publications alike
	maxReaderLen      = 128
)

// LogFeedConfig configures a [LogFeed]. The zero value reads the slot
// <table>_relay through the publication <table>_log, over a connection
// made like the store's pool's.
type LogFeedConfig struct {
	// ConnString opens the replication connection, as pgconn.ParseConfig
	// reads it; the feed adds replication=database. Default: the store's
	// pool's connection config, through its BeforeConnect hook. Required
	// when the store's database is not a *pgxpool.Pool.
	ConnString string
	// Slot is the logical replication slot the feed reads, and creates
	// (pgoutput, not temporary) when it is missing. Default the table's
	// name with _relay appended. 1 to 63 characters of a-z, 0-9 and _,
	// not starting with a digit or pg_. The slot is the feed's position:
	// relays that share it share one stream, read by one of them at a
	// time.
	Slot string
	// Publication names the outbox table's inserts to the slot; the feed
	// creates it (FOR TABLE the outbox table, publish = 'insert') when it
	// is missing. Default the table's name with _log appended. Same rule
	// as Slot.
	Publication string
	// Reader names this feed in the slot's progress row (see
	// [outboxdriver.SlotLeasePrefix]). Default host-pid-random; at most
	// 128 characters.
	Reader string
	// StandbyRetry is how often a feed that finds the slot held by
	// another reader tries again. The server frees the slot when its
	// reader's connection drops, so a standby takes over within about
	// StandbyRetry of a reader's death. Default [DefaultStandbyRetry];
	// negative is invalid.
	StandbyRetry time.Duration
	// StatusInterval is how often a reading feed tells the server its
	// confirmed position (which frees the WAL before it) and records its
	// progress row. A position that moved is told sooner, within 100 ms,
	// so that a reader that dies leaves little settled and unconfirmed
	// for the next one to deliver again. Default [DefaultStatusInterval];
	// negative is invalid.
	StatusInterval time.Duration
	// CoveredDelay is the margin that [outboxdriver.FeedHandler.Covered]
	// keeps behind the stream: a transaction open longer than this
	// between its event's created_at and its commit, or a writer whose
	// clock runs ahead of the database's by more, may have its events
	// claimed while the stream still brings them (a duplicate, never a
	// loss). It is also how long after a server crash an event waits
	// whose DONE the crash took back, behind the slot's confirmed
	// position, unless [Config.SynchronousBookkeeping] makes outcomes
	// durable before the feed confirms past them. Default
	// [DefaultCoveredDelay]; negative is invalid.
	CoveredDelay time.Duration
	// Clock times the retries, the status updates and the progress row,
	// and the Covered time of a slot the feed creates: give it the
	// store's clock. Default [outbox.SystemClock].
	Clock outbox.Clock
	// Logger receives what the feed retries (at warn: a lost connection,
	// a slot made again) and its start (at info). Default slog.Default().
	Logger *slog.Logger
}

// LogFeed is an [outboxdriver.Feed] that reads the outbox table's
// inserts from a logical replication slot: see the package doc's "Log
// feed" section. Made by [NewLogFeed]; its Stream is called by one
// goroutine at a time.
type LogFeed struct {
	d           *driver
	connect     func(ctx context.Context) (*pgconn.PgConn, error)
	slot        string
	publication string
	reader      string
	progressRow string // the slot's lease-table row

	standbyRetry, statusInterval, coveredDelay time.Duration
	clock                                      outbox.Clock
	logger                                     *slog.Logger

	// The statements of the replication connection (see sqlLogState).
	stateSQL, dropSlotSQL string
}

var _ outboxdriver.Feed = (*LogFeed)(nil)

// connectTimeout bounds a connection attempt whose config sets none.
const connectTimeout = 10 * time.Second

// NewLogFeed returns a feed of store's table. It checks cfg and touches
// no database: Stream creates what is missing. store must be a store of
// this package, not on a transaction.
func NewLogFeed(store *Store, cfg LogFeedConfig) (*LogFeed, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: postgres log feed needs a store", outbox.ErrInvalidRequest)
	}
	d, ok := store.Driver().(*driver)
	if !ok {
		return nil, fmt.Errorf("%w: postgres log feed needs a store made by postgres.NewStore", outbox.ErrInvalidRequest)
	}
	if _, ok := d.db.(pgx.Tx); ok {
		return nil, fmt.Errorf("%w: postgres log feed needs a store on a pool or a connection, not a transaction", outbox.ErrInvalidRequest)
	}
	if cfg.StandbyRetry < 0 || cfg.StatusInterval < 0 || cfg.CoveredDelay < 0 {
		return nil, fmt.Errorf("%w: postgres log feed: StandbyRetry, StatusInterval and CoveredDelay may not be negative", outbox.ErrInvalidRequest)
	}
	f := &LogFeed{
		d:              d,
		slot:           cmp.Or(cfg.Slot, d.t.name+slotSuffix),
		publication:    cmp.Or(cfg.Publication, d.t.name+publicationSuffix),
		reader:         cmp.Or(cfg.Reader, ident.Owner(maxReaderLen)),
		standbyRetry:   cmp.Or(cfg.StandbyRetry, DefaultStandbyRetry),
		statusInterval: cmp.Or(cfg.StatusInterval, DefaultStatusInterval),
		coveredDelay:   cmp.Or(cfg.CoveredDelay, DefaultCoveredDelay),
		clock:          cfg.Clock,
		logger:         cmp.Or(cfg.Logger, slog.Default()),
	}
	if nilcheck.Is(f.clock) {
		f.clock = outbox.SystemClock{}
	}
	if err := ident.ValidateNamed("slot", f.slot, maxSlotLen, ErrInvalidIdentifier); err != nil {
		return nil, err
	}
	if err := ident.ValidateNamed("publication", f.publication, maxSlotLen, ErrInvalidIdentifier); err != nil {
		return nil, err
	}
	if reason := codec.CheckText(f.reader, maxReaderLen); reason != "" {
		return nil, fmt.Errorf("%w: postgres log feed Reader %q is %s", outbox.ErrInvalidRequest, f.reader, reason)
	}
	connect, err := replicationConnector(d.db, cfg.ConnString)
	if err != nil {
		return nil, err
	}
	f.connect = connect
	f.progressRow = outboxdriver.SlotLeasePrefix + f.slot
	r := strings.NewReplacer("{table_literal}", literal(d.t.qualified), "{publication_literal}", literal(f.publication),
		"{slot_literal}", literal(f.slot))
	f.stateSQL, f.dropSlotSQL = r.Replace(sqlLogState), r.Replace(sqlDropSlot)
	return f, nil
}

// replicationConnector returns how to open a replication connection:
// from connString, or else like db's, which must then be a pool.
func replicationConnector(db DB, connString string) (func(ctx context.Context) (*pgconn.PgConn, error), error) {
	if connString != "" {
		config, err := pgconn.ParseConfig(connString)
		if err != nil {
			return nil, fmt.Errorf("%w: postgres log feed ConnString: %w", outbox.ErrInvalidRequest, err)
		}
		return func(ctx context.Context) (*pgconn.PgConn, error) {
			return pgconn.ConnectConfig(ctx, replicationConfig(config))
		}, nil
	}
	pool, ok := db.(*pgxpool.Pool)
	if !ok {
		return nil, fmt.Errorf("%w: postgres log feed needs a ConnString when the store's database is a %T, not a *pgxpool.Pool",
			outbox.ErrInvalidRequest, db)
	}
	poolConfig := pool.Config()
	return func(ctx context.Context) (*pgconn.PgConn, error) {
		connConfig, err := ownConnConfig(ctx, poolConfig, connectTimeout)
		if err != nil {
			return nil, err
		}
		return pgconn.ConnectConfig(ctx, replicationConfig(&connConfig.Config))
	}, nil
}

// replicationConfig is a copy of config for a replication connection:
// replication=database, whose session also runs SQL, and the settings
// that fix the text of the values pgoutput sends, which the decoder
// reads: ISO dates, hexadecimal bytea.
func replicationConfig(config *pgconn.Config) *pgconn.Config {
	c := config.Copy()
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = connectTimeout
	}
	c.RuntimeParams["replication"] = "database"
	c.RuntimeParams["DateStyle"] = "ISO"
	c.RuntimeParams["bytea_output"] = "hex"
	// Handlers set for the pool's connections are not for this one.
	c.OnNotice, c.OnNotification = nil, nil
	return c
}

// literal quotes s as an SQL string literal, for the replication
// connection, which takes no parameters.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Slot returns the name of the slot the feed reads.
func (f *LogFeed) Slot() string { return f.slot }

// Stream implements [outboxdriver.Feed]. It returns nil when ctx ends,
// after telling the server how far the settled transactions go, and
// otherwise only errors that retrying cannot mend: [ErrLogicalDecodingOff],
// [ErrLogFeedConflict], an [outbox.NotMigratedError] when the table does
// not exist, and the server's refusal for a missing privilege (the
// REPLICATION attribute, CREATE on the database for the publication,
// ownership of the table). Everything else it logs at warn and retries.
//
// h's methods are called from the goroutine that calls Stream; the
// replication connection is served by another, which keeps answering
// the server while h.Transaction blocks.
func (f *LogFeed) Stream(ctx context.Context, h outboxdriver.FeedHandler) error {
	readCtx, stop := context.WithCancel(ctx)
	defer stop()
	notes := make(chan logNote)
	done := make(chan error, 1)
	go func() { done <- newLogReader(f, notes).run(readCtx) }()
	for {
		select {
		case n := <-notes:
			if err := n.deliver(ctx, h); err != nil {
				stop()
				readErr := <-done
				if ctx.Err() != nil {
					return nil
				}
				return errors.Join(fmt.Errorf("postgres: log feed of slot %s: handler: %w", f.slot, err), readErr)
			}
		case err := <-done:
			return err
		}
	}
}

// logNote is a call of the handler, made by the reader's goroutine and
// delivered by Stream's: one of reading, covered and tx.
type logNote struct {
	kind    logNoteKind
	reading bool
	covered time.Time
	tx      outboxdriver.FeedTransaction
}

type logNoteKind int

const (
	noteReading logNoteKind = iota
	noteCovered
	noteTransaction
)

func (n *logNote) deliver(ctx context.Context, h outboxdriver.FeedHandler) error {
	switch n.kind {
	case noteReading:
		h.Reading(n.reading)
	case noteCovered:
		h.Covered(n.covered)
	case noteTransaction:
		return h.Transaction(ctx, n.tx)
	}
	return nil
}
