//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// The log relay scenarios run relays in log mode (SubscriberConfig.Feed,
// postgres.NewLogFeed) as child processes, on a replication slot of their
// test's own: the reader is killed while a standby waits, the slot is
// dropped under it, and the server is restarted.

const (
	// scenarioLogRelay is the child relay in log mode: the liveness
	// scenario's relay (the crash relays' queues, every liveness setting
	// at its default) with logRelayHandler; envSlot names its slot.
	scenarioLogRelay = "logrelay"
	logRelayTopic    = "logrelay"
	// logRelayPublication is the feeds' publication, one per test
	// database (slots are the server's, and named after the database).
	logRelayPublication = "faults_log"
)

// Codes of the server's errors the scenarios tell apart.
const (
	codeObjectInUse     = "55006" // a slot another session holds
	codeUndefinedObject = "42704" // a slot that does not exist
)

// logLedgerSchema adds to the ledger what the log relay scenarios read:
// which path delivered each event (fault_delivered.source), and for each
// committed id the database's WAL insert position and clock just after its
// commit returned (fault_commits), both at or past the commit's own.
const logLedgerSchema = `
ALTER TABLE fault_delivered ADD COLUMN source text NOT NULL DEFAULT '';
CREATE TABLE fault_commits (
    event_id text PRIMARY KEY,
    lsn      pg_lsn NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);`

// logFeedConfig is the child relay's feed: slot, read by owner, with
// every timing at its default, logging at info (the child's output, which
// a failed test shows).
func logFeedConfig(owner, slot string) postgres.LogFeedConfig {
	return postgres.LogFeedConfig{Slot: slot, Publication: logRelayPublication, Reader: owner, Logger: childLogger()}
}

// childLogger logs at info to the child's standard error.
func childLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// logRelayHandler records a delivery by owner and its source; the
// ledger's row gets the database's time.
func logRelayHandler(pool *pgxpool.Pool, owner string) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		_, err := pool.Exec(msg.Context(), `INSERT INTO fault_delivered (event_id, by_relay, source) VALUES ($1, $2, $3)`,
			msg.Metadata.Get(watermilladapter.MetadataEventID), owner, msg.Metadata.Get(watermilladapter.MetadataSource))
		return err
	}
}

// logRelayTest is the setup of a log relay scenario: its database, ledger
// and slot, and writers' write function.
type logRelayTest struct {
	url  string
	pool *pgxpool.Pool
	l    *ledger
	slot string
	// write writes with an outbox.Writer (no hot path: log mode has
	// none) and records each committed id's position (fault_commits).
	write writeFunc
	// unrecorded counts committed ids whose position could not be
	// recorded (the database went away after the commit).
	unrecorded atomic.Int64
}

// newLogRelayTest skips (fails on CI) unless the server decodes its WAL,
// and makes the scenario's ledger; the slot, named after the test
// database, and the publication are dropped at cleanup, after the relay
// processes are gone.
func newLogRelayTest(t *testing.T, scenario string) *logRelayTest {
	t.Helper()
	url := testdb.URL(t)
	pool := openPool(t, url, 8)
	testdb.RequireLogicalDecoding(t, pool)
	lt := &logRelayTest{url: url, pool: pool, l: newLedger(t, pool, scenario),
		slot: pool.Config().ConnConfig.Database + "_slot"}
	timeDeliveries(t, pool)
	_, err := pool.Exec(t.Context(), logLedgerSchema)
	require.NoError(t, err)
	t.Cleanup(func() { lt.dropFeedObjects(t) })

	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	lt.write = lt.recordingCommits(writeWithWriter(store, writer, logRelayTopic))
	return lt
}

// recordingCommits wraps write: once a transaction committed, it records
// the position and time of each of its ids (fault_commits). A failure to
// record is counted, not returned: the ids are committed.
func (lt *logRelayTest) recordingCommits(write writeFunc) writeFunc {
	return func(ctx context.Context, ids []string, rollback bool) error {
		if err := write(ctx, ids, rollback); err != nil {
			return err
		}
		if _, err := lt.pool.Exec(ctx, `INSERT INTO fault_commits (event_id, lsn) SELECT unnest($1::text[]), pg_current_wal_insert_lsn()`, ids); err != nil {
			lt.unrecorded.Add(int64(len(ids)))
		}
		return nil
	}
}

// startUnderLoad starts a relay named owner, waits until it reads the
// slot, and then starts the scenario's writers: two, 300-400 events/s
// here (transactions of 1-9 events), one transaction in ten rolled back.
// The slot is made before anything is written, so that the scenario's
// fault is the only one its figures show.
func (lt *logRelayTest) startUnderLoad(t *testing.T, owner string) (*relayProcess, *writers) {
	t.Helper()
	relay := lt.startRelay(t, owner)
	lt.waitReading(t, relay)
	return relay, startWriters(t, lt.l, writerConfig{
		writers: 2, batch: 9, randomBatch: true, pause: 15 * time.Millisecond, rollbackEvery: 10,
		write: lt.write,
	})
}

// startRelay starts a relay process in log mode on the scenario's slot.
func (lt *logRelayTest) startRelay(t *testing.T, owner string) *relayProcess {
	t.Helper()
	return startRelayProcess(t, lt.url, owner, envScenario+"="+scenarioLogRelay, envSlot+"="+lt.slot)
}

// logTail is the end of p's output: a relay in log mode logs what its
// feed does.
func logTail(p *relayProcess) string {
	out := p.out.String()
	if len(out) > 2000 {
		out = "..." + out[len(out)-2000:]
	}
	return fmt.Sprintf("%s, output:\n%s", p.output(), out)
}

// reader returns the relay reading the slot now (the application name of
// the session that holds it), "" when none does. A slot being created is
// held too, and has no confirmed position yet.
func (lt *logRelayTest) reader(ctx context.Context) (string, error) {
	var name string
	err := lt.pool.QueryRow(ctx, `
SELECT coalesce((SELECT a.application_name FROM pg_replication_slots s JOIN pg_stat_activity a ON a.pid = s.active_pid
                 WHERE s.slot_name = $1 AND s.confirmed_flush_lsn IS NOT NULL), '')`, lt.slot).Scan(&name)
	return name, err
}

// waitReading waits until p reads the slot.
func (lt *logRelayTest) waitReading(t *testing.T, p *relayProcess) {
	t.Helper()
	waitFor(t, p.owner+" reading the slot", 30*time.Second, func() (bool, string) {
		name, err := lt.reader(t.Context())
		if err != nil {
			return false, err.Error()
		}
		return name == p.owner, fmt.Sprintf("reader %q; %s", name, p.output())
	})
}

// waitStandingBy waits until p has a replication session and another
// relay reads the slot.
func (lt *logRelayTest) waitStandingBy(t *testing.T, p *relayProcess) {
	t.Helper()
	waitFor(t, p.owner+" standing by", 30*time.Second, func() (bool, string) {
		var sessions int
		if err := lt.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND backend_type = 'walsender'`,
			p.owner).Scan(&sessions); err != nil {
			return false, err.Error()
		}
		name, err := lt.reader(t.Context())
		if err != nil {
			return false, err.Error()
		}
		return sessions > 0 && name != "" && name != p.owner, fmt.Sprintf("%d replication sessions, reader %q; %s", sessions, name, p.output())
	})
}

// confirmed reads the slot's confirmed position.
func (lt *logRelayTest) confirmed(t *testing.T) string {
	t.Helper()
	var lsn string
	require.NoError(t, lt.pool.QueryRow(t.Context(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, lt.slot).Scan(&lsn))
	return lsn
}

// now reads the database's clock, the clock of the ledger's times.
func (lt *logRelayTest) now(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, lt.pool.QueryRow(t.Context(), `SELECT clock_timestamp()`).Scan(&now))
	return now
}

// waitDeliveryAfter waits until a relay named by (any relay when "")
// delivers after since, and returns when it first did.
func (lt *logRelayTest) waitDeliveryAfter(t *testing.T, by string, since time.Time, limit time.Duration, progress func() string) time.Time {
	t.Helper()
	var first *time.Time
	waitFor(t, fmt.Sprintf("a delivery by %q after %s", by, since.Format(time.RFC3339Nano)), limit, func() (bool, string) {
		if err := lt.pool.QueryRow(t.Context(), `SELECT min(at) FROM fault_delivered WHERE ($1 = '' OR by_relay = $1) AND at > $2`,
			by, since).Scan(&first); err != nil {
			return false, err.Error()
		}
		return first != nil, progress()
	})
	return *first
}

// openTransaction begins a transaction that holds a transaction id, on a
// connection of its own, closed at cleanup.
func (lt *logRelayTest) openTransaction(t *testing.T) pgx.Tx {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), lt.url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.Begin(t.Context())
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), `SELECT pg_current_xact_id()`)
	require.NoError(t, err)
	return tx
}

// committedBetween reads the events committed after from and at or
// before until (by the times recorded just after the commits): how many
// are not delivered yet, and when the last of the others was first
// delivered (nil when none was).
func (lt *logRelayTest) committedBetween(ctx context.Context, from, until time.Time) (missing int, last *time.Time, err error) {
	err = lt.pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE d.first IS NULL), max(d.first)
FROM fault_commits c
LEFT JOIN LATERAL (SELECT min(at) AS first FROM fault_delivered WHERE event_id = c.event_id) d ON true
WHERE c.at > $1 AND c.at <= $2`, from, until).Scan(&missing, &last)
	return missing, last, err
}

// dropSlot ends the session that reads the slot, if any, and drops the
// slot, again until the drop wins the race with the relay, which
// reconnects at once. It reports whether the slot existed, and how many
// attempts it took.
func (lt *logRelayTest) dropSlot(ctx context.Context) (existed bool, attempts int, err error) {
	for {
		attempts++
		// The timeout makes the termination wait for the session to end.
		_, err := lt.pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid, 5000) FROM pg_replication_slots
WHERE slot_name = $1 AND active_pid IS NOT NULL`, lt.slot)
		if err == nil {
			_, err = lt.pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, lt.slot)
		}
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			return true, attempts, nil
		case errors.As(err, &pgErr) && pgErr.Code == codeUndefinedObject:
			return false, attempts, nil
		case !errors.As(err, &pgErr) || pgErr.Code != codeObjectInUse:
			return false, attempts, err
		}
		select {
		case <-ctx.Done():
			return false, attempts, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// dropFeedObjects drops the slot, which would hold WAL forever and keep
// the database from being dropped, and the publication, which would
// outlive the table in a database testdb reuses.
func (lt *logRelayTest) dropFeedObjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := lt.dropSlot(ctx); err != nil {
		t.Errorf("drop slot %s: %v", lt.slot, err)
	}
	if _, err := lt.pool.Exec(ctx, `DROP PUBLICATION IF EXISTS `+pgx.Identifier{logRelayPublication}.Sanitize()); err != nil {
		t.Errorf("drop publication %s: %v", logRelayPublication, err)
	}
}
