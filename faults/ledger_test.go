//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// The ledger lives in the test's database. fault_written is written in the
// same transaction as the events, so it holds exactly the committed ids;
// fault_delivered has one row per delivery (no unique key: duplicates are
// what it counts).
const ledgerSchema = `
CREATE TABLE fault_written (event_id text PRIMARY KEY);
CREATE TABLE fault_rolled_back (event_id text PRIMARY KEY);
CREATE TABLE fault_delivered (event_id text NOT NULL, by_relay text NOT NULL DEFAULT '');
CREATE INDEX fault_delivered_id_idx ON fault_delivered (event_id);
CREATE INDEX fault_delivered_by_idx ON fault_delivered (by_relay);`

// timeDeliveries adds to the ledger the database's time of each delivery
// (fault_delivered.at), for scenarios that time recoveries across
// processes by one clock.
func timeDeliveries(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `ALTER TABLE fault_delivered ADD COLUMN at timestamptz NOT NULL DEFAULT clock_timestamp()`)
	require.NoError(t, err)
}

// errRollback is what writers return to roll a transaction back on purpose.
var errRollback = errors.New("business rule failed: roll back")

// ledger checks one scenario's deliveries against its committed writes.
type ledger struct {
	pool     *pgxpool.Pool // the PostgreSQL scenarios' database; nil on another store
	db       ledgerDB      // where the ledger's tables and the outbox table are
	scenario string

	mu         sync.Mutex
	delivered  []delivery // in-memory deliveries not yet copied to fault_delivered
	rolledBack []string   // ids of transactions rolled back on purpose, not yet copied
}

func newLedger(t *testing.T, pool *pgxpool.Pool, scenario string) *ledger {
	t.Helper()
	_, err := pool.Exec(t.Context(), ledgerSchema)
	require.NoError(t, err)
	return &ledger{pool: pool, db: pgLedger{pool}, scenario: scenario}
}

// ledgerDB is the database of a ledger's tables and of the outbox table
// it checks: PostgreSQL (pgLedger) or MySQL (mysqlLedger).
type ledgerDB interface {
	// flush copies in-memory records in one transaction.
	flush(ctx context.Context, delivered []delivery, rolledBack []string) error
	// count counts the ledger's tables.
	count(ctx context.Context) (figures, error)
	// outboxState counts the outbox table's rows.
	outboxState(ctx context.Context) (tableState, error)
}

// pgLedger is the ledger of the PostgreSQL scenarios.
type pgLedger struct{ pool *pgxpool.Pool }

// recordWritten adds ids to the ledger in tx, the transaction that writes
// their events: they count as written exactly when it commits.
func recordWritten(ctx context.Context, tx pgx.Tx, ids []string) error {
	_, err := tx.Exec(ctx, `INSERT INTO fault_written (event_id) SELECT unnest($1::text[])`, ids)
	return err
}

// recordDelivered adds one delivery to the ledger on db: for handlers in
// another process.
func recordDelivered(ctx context.Context, db *pgxpool.Pool, id, by string) error {
	_, err := db.Exec(ctx, `INSERT INTO fault_delivered (event_id, by_relay) VALUES ($1, $2)`, id, by)
	return err
}

type delivery struct{ id, by string }

// deliver records a delivery in memory: for handlers in this process, so
// that the ledger adds no database load (and no failure) to the handler.
func (l *ledger) deliver(id, by string) {
	l.mu.Lock()
	l.delivered = append(l.delivered, delivery{id, by})
	l.mu.Unlock()
}

// handler is a router handler that records each delivery by its event id.
func (l *ledger) handler(msg *message.Message) error { return l.handlerFor("")(msg) }

// handlerFor is handler for the relay named by.
func (l *ledger) handlerFor(by string) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		l.deliver(msg.Metadata.Get(watermilladapter.MetadataEventID), by)
		return nil
	}
}

// rolledBackOnPurpose notes ids whose transaction the writer rolled back.
func (l *ledger) rolledBackOnPurpose(ids []string) {
	l.mu.Lock()
	l.rolledBack = append(l.rolledBack, ids...)
	l.mu.Unlock()
}

// figures are a ledger's counts.
type figures struct {
	events     int64 // ids written by committed transactions
	rolledBack int64 // ids of transactions rolled back on purpose
	deliveries int64 // deliveries, duplicates included
	distinct   int64 // distinct ids delivered
	lost       int64 // committed, never delivered
	duplicates int64 // deliveries - distinct
	phantom    int64 // delivered, never committed
}

func (f figures) String() string {
	return fmt.Sprintf("events=%d lost=%d duplicates=%d phantom=%d rolled_back=%d deliveries=%d",
		f.events, f.lost, f.duplicates, f.phantom, f.rolledBack, f.deliveries)
}

// count copies the in-memory records to the database and counts.
func (l *ledger) count(ctx context.Context) (figures, error) {
	l.mu.Lock()
	delivered, rolledBack := l.delivered, l.rolledBack
	l.delivered, l.rolledBack = nil, nil
	l.mu.Unlock()
	if err := l.flush(ctx, delivered, rolledBack); err != nil {
		// Keep them for the next try.
		l.mu.Lock()
		l.delivered = append(delivered, l.delivered...)
		l.rolledBack = append(rolledBack, l.rolledBack...)
		l.mu.Unlock()
		return figures{}, err
	}
	return l.db.count(ctx)
}

func (pg pgLedger) count(ctx context.Context) (figures, error) {
	var f figures
	err := pg.pool.QueryRow(ctx, `
SELECT (SELECT count(*) FROM fault_written),
       (SELECT count(*) FROM fault_rolled_back),
       (SELECT count(*) FROM fault_delivered),
       (SELECT count(DISTINCT event_id) FROM fault_delivered),
       (SELECT count(*) FROM fault_written w
         WHERE NOT EXISTS (SELECT 1 FROM fault_delivered d WHERE d.event_id = w.event_id)),
       (SELECT count(DISTINCT event_id) FROM fault_delivered d
         WHERE NOT EXISTS (SELECT 1 FROM fault_written w WHERE w.event_id = d.event_id))`).
		Scan(&f.events, &f.rolledBack, &f.deliveries, &f.distinct, &f.lost, &f.phantom)
	f.duplicates = f.deliveries - f.distinct
	return f, err
}

// flush copies in one transaction, so that a failed flush can be retried
// whole.
func (l *ledger) flush(ctx context.Context, delivered []delivery, rolledBack []string) error {
	if len(delivered) == 0 && len(rolledBack) == 0 {
		return nil
	}
	return l.db.flush(ctx, delivered, rolledBack)
}

func (pg pgLedger) flush(ctx context.Context, delivered []delivery, rolledBack []string) error {
	return pgx.BeginFunc(ctx, pg.pool, func(tx pgx.Tx) error {
		rows := make([][]any, len(delivered))
		for i, d := range delivered {
			rows[i] = []any{d.id, d.by}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"fault_delivered"}, []string{"event_id", "by_relay"}, pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO fault_rolled_back (event_id) SELECT unnest($1::text[])`, rolledBack)
		return err
	})
}

// waitDelivered waits until every committed id has been delivered and the
// outbox has no pending row and no claim left (DEAD rows allowed), and
// returns the figures.
func (l *ledger) waitDelivered(t *testing.T, limit time.Duration) figures {
	t.Helper()
	var f figures
	var st tableState
	waitFor(t, "every committed event delivered and every row settled", limit, func() (bool, string) {
		var err error
		if f, err = l.count(t.Context()); err != nil {
			return false, err.Error()
		}
		if st, err = l.db.outboxState(t.Context()); err != nil {
			return false, err.Error()
		}
		return f.lost == 0 && st.pending == 0 && st.claimed == 0, fmt.Sprintf("%s; outbox %s", f, st)
	})
	return f
}

// report logs the scenario's figures in the one format the README's table
// is collected from.
func (l *ledger) report(t *testing.T, f figures, runs, faults int, extra ...string) {
	t.Helper()
	line := fmt.Sprintf("ledger: scenario=%s runs=%d faults=%d events=%d lost=%d duplicates=%d phantom=%d rolled_back=%d",
		l.scenario, runs, faults, f.events, f.lost, f.duplicates, f.phantom, f.rolledBack)
	if len(extra) > 0 {
		line += " " + strings.Join(extra, " ")
	}
	t.Log(line)
}

// tableState counts the outbox rows by what is left to do.
type tableState struct {
	total, done, pending, dead, claimed int64
}

func (s tableState) String() string {
	return fmt.Sprintf("rows=%d done=%d pending=%d dead=%d claimed=%d", s.total, s.done, s.pending, s.dead, s.claimed)
}

func (pg pgLedger) outboxState(ctx context.Context) (tableState, error) {
	return outboxState(ctx, pg.pool)
}

func outboxState(ctx context.Context, db *pgxpool.Pool) (tableState, error) {
	var s tableState
	err := db.QueryRow(ctx, `
SELECT count(*), count(*) FILTER (WHERE status = 1), count(*) FILTER (WHERE status IN (0, 2)),
       count(*) FILTER (WHERE status = 3), count(*) FILTER (WHERE locked_by IS NOT NULL OR locked_at IS NOT NULL OR locked_until IS NOT NULL)
FROM outbox_event`).Scan(&s.total, &s.done, &s.pending, &s.dead, &s.claimed)
	return s, err
}

// waitFor polls cond until it holds, failing the test after limit with the
// last progress cond reported.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, progress := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last seen: %s", limit, what, progress)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("test ended waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// openPool opens a pool of at most maxConns connections on url, closed at
// cleanup (before testdb drops the database: cleanups run last first).
func openPool(t *testing.T, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// writeFunc writes events with the given ids in one transaction, records
// them with recordWritten in that transaction, and returns errRollback
// (after writing) when rollback is set.
type writeFunc func(ctx context.Context, ids []string, rollback bool) error

// writerConfig paces the writers of a scenario.
type writerConfig struct {
	writers       int           // goroutines
	batch         int           // events per transaction (1..batch, at random, when randomBatch)
	randomBatch   bool          // draw each transaction's size in 1..batch
	pause         time.Duration // between two transactions of one writer
	rollbackEvery int           // every nth transaction of a writer rolls back on purpose; 0: never
	write         writeFunc
}

// writers keep writing until stopped; a failed transaction (a fault) is
// counted and retried with new ids after a short pause, as a business
// retry would.
type writers struct {
	l       *ledger
	cfg     writerConfig
	stopCh  chan struct{}
	wg      sync.WaitGroup
	stopped atomic.Bool

	commits, rollbacks, failures, events atomic.Int64
	lastErr                              atomic.Value // string
}

func startWriters(t *testing.T, l *ledger, cfg writerConfig) *writers {
	t.Helper()
	w := &writers{l: l, cfg: cfg, stopCh: make(chan struct{})}
	for range cfg.writers {
		w.wg.Go(w.run)
	}
	t.Cleanup(w.stop)
	return w
}

func (w *writers) run() {
	ctx := context.Background()
	for n := 1; ; n++ {
		select {
		case <-w.stopCh:
			return
		default:
		}
		size := w.cfg.batch
		if w.cfg.randomBatch {
			size = 1 + rand.IntN(w.cfg.batch)
		}
		ids := make([]string, size)
		for i := range ids {
			ids[i] = outbox.NewID()
		}
		rollback := w.cfg.rollbackEvery > 0 && n%w.cfg.rollbackEvery == 0
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := w.cfg.write(tctx, ids, rollback)
		cancel()
		switch {
		case rollback && errors.Is(err, errRollback):
			w.rollbacks.Add(1)
			w.l.rolledBackOnPurpose(ids)
		case err != nil:
			w.failures.Add(1)
			w.lastErr.Store(err.Error())
			pause(w.stopCh, 20*time.Millisecond)
			continue
		default:
			w.commits.Add(1)
			w.events.Add(int64(size))
		}
		pause(w.stopCh, w.cfg.pause)
	}
}

// stop ends the writers and waits for them; it is idempotent.
func (w *writers) stop() {
	if w.stopped.CompareAndSwap(false, true) {
		close(w.stopCh)
	}
	w.wg.Wait()
}

func (w *writers) String() string {
	last, _ := w.lastErr.Load().(string)
	return fmt.Sprintf("commits=%d events=%d rollbacks=%d failures=%d last_error=%q",
		w.commits.Load(), w.events.Load(), w.rollbacks.Load(), w.failures.Load(), last)
}

// pause waits d (pacing, not synchronisation) or until stop closes.
func pause(stop <-chan struct{}, d time.Duration) {
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-stop:
	case <-timer.C:
	}
}

// faultTested is the event type the scenarios write.
const faultTested outbox.EventType = "FaultTested"

func payloadFor(id string) []byte { return fmt.Appendf(nil, `{"event":%q,"note":"fault suite"}`, id) }

// writeWithWriter writes through an outbox.Writer on a PostgreSQL store:
// no hot path, the relays' pollers deliver.
func writeWithWriter(store *postgres.Store, w *outbox.Writer[pgx.Tx], topic string) writeFunc {
	return func(ctx context.Context, ids []string, rollback bool) error {
		return store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			envs := make([]outbox.Envelope, len(ids))
			for i, id := range ids {
				envs[i] = outbox.Envelope{ID: id, Type: faultTested, Topic: topic, PayloadJSON: payloadFor(id)}
			}
			if _, err := w.Write(ctx, tx, envs...); err != nil {
				return err
			}
			if err := recordWritten(ctx, tx, ids); err != nil {
				return err
			}
			if rollback {
				return errRollback
			}
			return nil
		})
	}
}

// writeWithPublisher publishes through the Watermill publisher of a relay
// in the business transaction: the hot path of that relay delivers.
func writeWithPublisher(store *postgres.Store, pub *watermilladapter.Publisher[pgx.Tx], topic string, payload func(id string) []byte) writeFunc {
	if payload == nil {
		payload = payloadFor
	}
	return func(ctx context.Context, ids []string, rollback bool) error {
		return store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			msgs := make([]*message.Message, len(ids))
			for i, id := range ids {
				msgs[i] = message.NewMessage(watermill.NewUUID(), payload(id))
				msgs[i].Metadata.Set(watermilladapter.MetadataEventID, id)
				msgs[i].Metadata.Set(watermilladapter.MetadataEventType, string(faultTested))
				msgs[i].SetContext(ctx)
			}
			if err := pub.Publish(topic, msgs...); err != nil {
				return err
			}
			if err := recordWritten(ctx, tx, ids); err != nil {
				return err
			}
			if rollback {
				return errRollback
			}
			return nil
		})
	}
}

// errorLog is a slog handler that counts the errors a relay reports
// (and keeps the last), for scenarios whose outages it logs.
type errorLog struct {
	errors atomic.Int64
	last   atomic.Value // string
}

func (l *errorLog) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelError }

func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	l.errors.Add(1)
	text := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "error" {
			text += ": " + a.Value.String()
		}
		return true
	})
	l.last.Store(text)
	return nil
}

func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler { return l }

func (l *errorLog) WithGroup(string) slog.Handler { return l }

func (l *errorLog) String() string {
	last, _ := l.last.Load().(string)
	return fmt.Sprintf("%d errors, last %q", l.errors.Load(), last)
}

// requireRecoveredFromKills checks a scenario whose relays were killed:
// nothing lost or made up, duplicates no more than the killed relays held
// (bound; inFlight, what each held, for the message), every committed
// event DONE and no other row.
func requireRecoveredFromKills(t *testing.T, f figures, st tableState, bound int64, inFlight []int64) {
	t.Helper()
	require.Zero(t, f.lost, "lost")
	require.Zero(t, f.phantom, "delivered but never committed")
	require.Positive(t, f.rolledBack, "some transactions rolled back on purpose")
	require.LessOrEqual(t, f.duplicates, bound, "duplicates bounded by what the killed relays held: %v", inFlight)
	require.Equal(t, f.events, st.done, "every committed event is DONE: %s", st)
	require.Zero(t, st.pending+st.claimed+st.dead, "nothing pending, claimed or DEAD: %s", st)
	require.Equal(t, f.events, st.total, "no row from a rolled-back transaction: %s", st)
}
