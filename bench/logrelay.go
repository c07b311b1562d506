package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// The log relay: a Subscriber in log mode (SubscriberConfig.Feed) reading
// the table's inserts from a logical replication slot through
// postgres.LogFeed. Every scenario that runs one makes the table's slot and
// publication first and drops them at its end: a slot left behind keeps
// the server's WAL forever, and a server has few of them.

// logStartTimeout bounds the wait for a feed to read its slot. Making a
// slot waits for the transactions running on the server to end.
const logStartTimeout = time.Minute

// logFeedConfig names the slot and the publication of table's log relay.
func logFeedConfig(table postgres.Config) postgres.LogFeedConfig {
	return postgres.LogFeedConfig{Slot: table.Table + "_slot", Publication: table.Table + "_pub", Logger: warnLogger}
}

// logUnavailable says why the server cannot serve a log relay, "" when it
// can: its wal_level must be logical, and a replication slot free.
func logUnavailable(ctx context.Context, pool *pgxpool.Pool) string {
	var (
		level string
		free  int
	)
	err := pool.QueryRow(ctx, `SELECT current_setting('wal_level'),
		current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots)`).Scan(&level, &free)
	switch {
	case err != nil:
		return fmt.Sprintf("cannot read wal_level: %v", err)
	case level != "logical":
		return fmt.Sprintf("wal_level is %s, not logical", level)
	case free < 1:
		return "every replication slot of the server is taken"
	}
	return ""
}

// walSenderPerEvent returns the CPU time used per event, over n events,
// by the WAL sender that serves the reader of table's slot, since it
// started with the reader: the database's side of a log relay beyond its
// statements. 0 when unknown: a server on another machine, or no reader.
func walSenderPerEvent(ctx context.Context, pool *pgxpool.Pool, table postgres.Config, n int) time.Duration {
	if !onThisMachine(pool.Config().ConnConfig.Host) {
		return 0
	}
	var pid *int32
	err := pool.QueryRow(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", logFeedConfig(table).Slot).Scan(&pid)
	if err != nil || pid == nil {
		return 0
	}
	cpu, ok := postgresCPU(int(*pid))
	if !ok {
		return 0
	}
	return cpu / time.Duration(max(n, 1))
}

// readingFeed is a log feed that tells when it first reads its slot: the
// feed starts with the relay's first subscription and reaches the slot a
// moment later, and a run that wrote meanwhile would time that start.
type readingFeed struct {
	outboxdriver.Feed
	reading chan struct{} // closed at the first Reading(true)
	once    sync.Once
	failed  chan error // the first error Stream returned
}

func newReadingFeed(store *postgres.Store, table postgres.Config) (*readingFeed, error) {
	feed, err := postgres.NewLogFeed(store, logFeedConfig(table))
	if err != nil {
		return nil, err
	}
	return &readingFeed{Feed: feed, reading: make(chan struct{}), failed: make(chan error, 1)}, nil
}

// Stream implements outboxdriver.Feed.
func (f *readingFeed) Stream(ctx context.Context, h outboxdriver.FeedHandler) error {
	err := f.Feed.Stream(ctx, readingHandler{FeedHandler: h, f: f})
	if err != nil {
		select {
		case f.failed <- err:
		default:
		}
	}
	return err
}

// waitReading returns once the feed reads its slot, or an error when its
// Stream failed first or logStartTimeout passed.
func (f *readingFeed) waitReading(ctx context.Context) error {
	timer := time.NewTimer(logStartTimeout)
	defer timer.Stop()
	select {
	case <-f.reading:
		return nil
	case err := <-f.failed:
		return fmt.Errorf("log feed: %w", err)
	case <-timer.C:
		return fmt.Errorf("log feed: not reading its slot after %s", logStartTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

type readingHandler struct {
	outboxdriver.FeedHandler
	f *readingFeed
}

func (h readingHandler) Reading(reading bool) {
	h.FeedHandler.Reading(reading)
	if reading {
		h.f.once.Do(func() { close(h.f.reading) })
	}
}

// idleHandler is the handler of the feed openLog streams: nothing is
// written to the table before it stops.
type idleHandler struct{}

func (idleHandler) Transaction(ctx context.Context, _ outboxdriver.FeedTransaction) error {
	<-ctx.Done()
	return ctx.Err()
}

func (idleHandler) Reading(bool)      {}
func (idleHandler) Covered(time.Time) {}

// openLog makes table's publication and slot (logFeedConfig) through a
// feed that streams until it reads the slot, so that every event written
// afterwards is in the slot's stream, and returns what drops them.
func openLog(ctx context.Context, pool *pgxpool.Pool, table postgres.Config) (closeLog func() error, err error) {
	store, err := postgres.NewStore(pool, table)
	if err != nil {
		return nil, err
	}
	feed, err := newReadingFeed(store, table)
	if err != nil {
		return nil, err
	}
	closeLog = func() error { return dropLog(pool, table) }
	streamCtx, stop := context.WithCancel(ctx)
	streamed := make(chan error, 1)
	go func() { streamed <- feed.Stream(streamCtx, idleHandler{}) }()
	err = feed.waitReading(ctx)
	stop()
	if err = errors.Join(err, <-streamed); err != nil {
		return nil, errors.Join(fmt.Errorf("make the log of %s: %w", table.Table, err), closeLog())
	}
	return closeLog, nil
}

// dropLog drops table's slot and publication, once the slot's reader has
// let go of it.
func dropLog(pool *pgxpool.Pool, table postgres.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := logFeedConfig(table)
	if err := dropSlots(ctx, pool, "slot_name = $1", cfg.Slot); err != nil {
		return fmt.Errorf("drop slot %s: %w", cfg.Slot, err)
	}
	if _, err := pool.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{cfg.Publication}.Sanitize()); err != nil {
		return fmt.Errorf("drop publication %s: %w", cfg.Publication, err)
	}
	return nil
}

// dropSlots drops the replication slots for which filter holds ($1 is
// arg). A reader's WAL sender ends a moment after its connection closes,
// and holds its slot until then: a slot in use is tried again until ctx
// ends.
func dropSlots(ctx context.Context, db querier, filter string, arg any) error {
	for {
		_, err := db.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE "+filter, arg)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55006" { // object_in_use
			return err
		}
		if sleep(ctx, 20*time.Millisecond) != nil {
			return err
		}
	}
}
