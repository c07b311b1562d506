package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// feedWait bounds every wait of the log feed tests for something the
// feed does.
const feedWait = 20 * time.Second

// feedTableCount numbers the feed tests' tables.
var feedTableCount atomic.Int64

// feedEnv is one test's outbox table, on a database of its own, and what
// writes to it.
type feedEnv struct {
	pool   *pgxpool.Pool
	store  *postgres.Store
	writer *outbox.Writer[pgx.Tx]
	table  string
}

// newFeedEnv migrates a table named after this process and test, since
// the slot a feed names after it is the server's, not the database's; at
// cleanup, once the test's feeds stopped, the slot and publication the
// feeds made of it are dropped. clock is the store's, nil for the
// system clock. It skips the test unless the server's wal_level is
// logical, or fails it under CI=true.
func newFeedEnv(t *testing.T, clock outbox.Clock) *feedEnv {
	t.Helper()
	return newFeedEnvConfig(t, postgres.Config{Clock: clock})
}

// newFeedEnvConfig is newFeedEnv with the store's cfg, whose Table it
// sets.
func newFeedEnvConfig(t *testing.T, cfg postgres.Config) *feedEnv {
	t.Helper()
	pool := testdb.New(t)
	testdb.RequireLogicalDecoding(t, pool)
	table := fmt.Sprintf("feed_%d_%d", os.Getpid(), feedTableCount.Add(1))
	require.NoError(t, postgres.Migrate(t.Context(), pool, postgres.Config{Table: table}))
	cfg.Table = table
	store, err := postgres.NewStore(pool, cfg)
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { dropFeedObjects(t, pool, table+"_relay", table+"_log") })
	return &feedEnv{pool: pool, store: store, writer: writer, table: table}
}

// dropFeedObjects drops slot and publication, waiting for a reader that
// is still leaving the slot.
func dropFeedObjects(t *testing.T, pool *pgxpool.Pool, slot, publication string) {
	ctx, cancel := context.WithTimeout(context.Background(), feedWait)
	defer cancel()
	for {
		_, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Errorf("drop slot %s: %v", slot, err)
			break
		}
		time.Sleep(10 * time.Millisecond) // the reader's session is exiting
	}
	if _, err := pool.Exec(ctx, `DROP PUBLICATION IF EXISTS `+pgx.Identifier{publication}.Sanitize()); err != nil {
		t.Errorf("drop publication %s: %v", publication, err)
	}
}

// write commits events in one transaction and returns their ids.
func (e *feedEnv) write(t *testing.T, events ...outbox.Envelope) []string {
	t.Helper()
	var ids []string
	require.NoError(t, e.store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		var err error
		ids, err = e.writer.Write(ctx, tx, events...)
		return err
	}))
	return ids
}

// feed returns a log feed of the table.
func (e *feedEnv) feed(t *testing.T, cfg postgres.LogFeedConfig) *postgres.LogFeed {
	t.Helper()
	f, err := postgres.NewLogFeed(e.store, cfg)
	require.NoError(t, err)
	return f
}

// slotConfirmed returns the slot's confirmed_flush_lsn.
func (e *feedEnv) slotConfirmed(t *testing.T, slot string) pglogrepl.LSN {
	t.Helper()
	var text string
	require.NoError(t, e.pool.QueryRow(t.Context(),
		`SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&text))
	lsn, err := pglogrepl.ParseLSN(text)
	require.NoError(t, err)
	return lsn
}

// walInsertLSN returns the server's WAL insert position.
func (e *feedEnv) walInsertLSN(t *testing.T) pglogrepl.LSN {
	t.Helper()
	var text string
	require.NoError(t, e.pool.QueryRow(t.Context(), `SELECT pg_current_wal_insert_lsn()::text`).Scan(&text))
	lsn, err := pglogrepl.ParseLSN(text)
	require.NoError(t, err)
	return lsn
}

// running is a Stream call in a goroutine of its own.
type running struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// run calls f.Stream(h) until stop, or the test's end.
func run(t *testing.T, f *postgres.LogFeed, h outboxdriver.FeedHandler) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- f.Stream(ctx, h) }()
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("Stream: %v", err)
		}
	})
	return r
}

// stop ends the Stream call and returns what it returned.
func (r *running) stop() error {
	r.once.Do(func() {
		r.cancel()
		r.err = <-r.done
	})
	return r.err
}

// recorder is a FeedHandler that records the feed's calls. Its
// transactions block while hold is set, until release.
type recorder struct {
	mu       sync.Mutex
	txs      []outboxdriver.FeedTransaction
	readings []bool
	covered  []time.Time
	hold     chan struct{}
}

func (r *recorder) Transaction(ctx context.Context, tx outboxdriver.FeedTransaction) error {
	r.mu.Lock()
	r.txs = append(r.txs, tx)
	hold := r.hold
	r.mu.Unlock()
	if hold == nil {
		return nil
	}
	select {
	case <-hold:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *recorder) Reading(reading bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.readings = append(r.readings, reading)
}

func (r *recorder) Covered(t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.covered = append(r.covered, t)
}

func (r *recorder) transactions() []outboxdriver.FeedTransaction {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.txs)
}

// reading reports the last Reading call, false before any.
func (r *recorder) reading() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.readings) > 0 && r.readings[len(r.readings)-1]
}

func (r *recorder) readingCalls() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.readings)
}

func (r *recorder) coveredTimes() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.covered)
}

// ids are the event ids of txs, transaction by transaction.
func ids(txs []outboxdriver.FeedTransaction) [][]string {
	out := make([][]string, len(txs))
	for i, tx := range txs {
		for _, e := range tx.Events {
			out[i] = append(out[i], e.ID)
		}
	}
	return out
}

// waitTransactions waits until h received n transactions, and returns
// them.
func waitTransactions(t *testing.T, h *recorder, n int) []outboxdriver.FeedTransaction {
	t.Helper()
	require.Eventually(t, func() bool { return len(h.transactions()) >= n }, feedWait, 10*time.Millisecond,
		"the feed handed over %d transactions, not %d", len(h.transactions()), n)
	return h.transactions()
}

// Transactions come in commit order, each with its events in insert
// order, decoded as the store reads them back: every column, to the
// microsecond, and JSON payloads whichever column holds them.
func TestLogFeedStreamsCommittedTransactionsInOrder(t *testing.T) {
	t.Parallel()
	for _, docs := range []bool{false, true} {
		t.Run(fmt.Sprintf("JSONPayloadColumn=%t", docs), func(t *testing.T) {
			t.Parallel()
			testLogFeedStreamsInOrder(t, newFeedEnvConfig(t, postgres.Config{JSONPayloadColumn: docs}))
		})
	}
}

func testLogFeedStreamsInOrder(t *testing.T, env *feedEnv) {
	h := &recorder{}
	feed := env.feed(t, postgres.LogFeedConfig{StatusInterval: 50 * time.Millisecond, Reader: "reader-1"})
	require.Equal(t, env.table+"_relay", feed.Slot())
	run(t, feed, h)
	require.Eventually(t, h.reading, feedWait, 10*time.Millisecond)

	occurred := time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.FixedZone("x", 5*3600+1800))
	first := env.write(t,
		outbox.Envelope{
			Type: "OrderPlaced", Topic: "orders", OccurredAt: occurred,
			AggregateType: "Order", AggregateID: "o-1", TenantID: "tenant-a",
			Headers:     map[string]string{"trace": "abc", "ü": "\"quoted\""},
			PayloadJSON: []byte(`{"b": 1,  "a": [true, null]}`), IdempotencyKey: "place-o-1",
		},
		outbox.NewBytes("Blob", []byte{0, 1, 2, 0xff, '\\', 'x'}),
		outbox.NewBytes("Empty", []byte{}),
	)
	// A transaction that writes no event is not handed over.
	_, err := env.pool.Exec(t.Context(), `CREATE TABLE other (x int); INSERT INTO other VALUES (1)`)
	require.NoError(t, err)
	second := env.write(t, outbox.Envelope{Type: "Later", DeliverIn: time.Hour, PayloadJSON: []byte(`"x"`)})
	rolledBack := errors.New("rolled back")
	require.ErrorIs(t, env.store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := env.writer.Write(ctx, tx, outbox.NewJSON("Never", []byte(`{}`)))
		require.NoError(t, err)
		return rolledBack
	}), rolledBack)
	third := env.write(t, outbox.NewJSON("Third", []byte(`[]`)))

	txs := waitTransactions(t, h, 3)
	require.Equal(t, [][]string{first, second, third}, ids(txs))
	for _, tx := range txs {
		require.False(t, tx.CommitTime.IsZero())
		require.NotNil(t, tx.Settled)
		for _, got := range tx.Events {
			want, ok, err := env.store.Driver().Get(t.Context(), got.ID)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, want, got)
		}
	}
	require.False(t, txs[2].CommitTime.Before(txs[0].CommitTime))

	// Covered follows the commits, CoveredDelay behind, and never goes
	// back.
	require.Eventually(t, func() bool {
		covered := h.coveredTimes()
		return len(covered) > 0 && !covered[len(covered)-1].Before(txs[2].CommitTime.Add(-postgres.DefaultCoveredDelay))
	}, feedWait, 10*time.Millisecond)
	covered := h.coveredTimes()
	require.True(t, slices.IsSortedFunc(covered, time.Time.Compare), "Covered went back: %v", covered)
	require.Equal(t, []bool{true}, h.readingCalls())

	// The progress row tells operators who reads the slot.
	require.Eventually(t, func() bool {
		stats, err := env.store.Stats(t.Context())
		require.NoError(t, err)
		i := slices.IndexFunc(stats.Slots, func(s outbox.SlotStats) bool { return s.Name == feed.Slot() })
		return i >= 0 && stats.Slots[i].Active && stats.Slots[i].Reader == "reader-1" && !stats.Slots[i].ConfirmedAt.IsZero()
	}, feedWait, 10*time.Millisecond)
}

// Inserts into other tables of the publication are passed over.
func TestLogFeedPassesOverOtherTables(t *testing.T) {
	t.Parallel()
	env := newFeedEnv(t, nil)
	h := &recorder{}
	run(t, env.feed(t, postgres.LogFeedConfig{}), h)
	require.Eventually(t, h.reading, feedWait, 10*time.Millisecond)
	_, err := env.pool.Exec(t.Context(), `CREATE TABLE other (x int);
ALTER PUBLICATION `+pgx.Identifier{env.table + "_log"}.Sanitize()+` ADD TABLE other;
INSERT INTO other VALUES (1)`)
	require.NoError(t, err)
	require.NoError(t, env.store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO other VALUES (2)`); err != nil {
			return err
		}
		_, err := env.writer.Write(ctx, tx, outbox.NewJSON("Mixed", []byte(`{}`)))
		return err
	}))
	last := env.write(t, outbox.NewJSON("Last", []byte(`{}`)))
	txs := waitTransactions(t, h, 2)
	require.Len(t, txs[0].Events, 1)
	require.Equal(t, "Mixed", txs[0].Events[0].Type)
	require.Equal(t, [][]string{last}, ids(txs[1:]))
}

// The slot is confirmed only past transactions whose events are all
// settled, up to the first that is not, whatever order they settle in:
// a feed started again hands over the unsettled one and everything after
// it, and nothing before.
func TestLogFeedConfirmsOnlySettledPrefix(t *testing.T) {
	t.Parallel()
	env := newFeedEnv(t, nil)
	cfg := postgres.LogFeedConfig{StatusInterval: 20 * time.Millisecond}
	h := &recorder{}
	first := run(t, env.feed(t, cfg), h)
	require.Eventually(t, h.reading, feedWait, 10*time.Millisecond)

	beforeOne := env.walInsertLSN(t)
	one := env.write(t, outbox.NewJSON("One", []byte(`1`)))
	afterOne := env.walInsertLSN(t)
	two := env.write(t, outbox.NewJSON("Two", []byte(`2`)))
	three := env.write(t, outbox.NewJSON("Three", []byte(`3`)))
	txs := waitTransactions(t, h, 3)
	require.Equal(t, [][]string{one, two, three}, ids(txs))
	txs[2].Settled()
	txs[0].Settled()
	txs[0].Settled() // once is enough; again is harmless

	slot := env.table + "_relay"
	require.Eventually(t, func() bool { return env.slotConfirmed(t, slot) > beforeOne }, feedWait, 10*time.Millisecond)
	require.NoError(t, first.stop())
	confirmed := env.slotConfirmed(t, slot)
	require.Greater(t, confirmed, beforeOne)
	require.LessOrEqual(t, confirmed, afterOne, "the slot went past the unsettled transaction")

	again := &recorder{}
	run(t, env.feed(t, cfg), again)
	txs = waitTransactions(t, again, 2)
	require.Equal(t, [][]string{two, three}, ids(txs))
	for _, tx := range txs {
		tx.Settled()
	}
	afterThree := env.walInsertLSN(t)
	require.Eventually(t, func() bool { return env.slotConfirmed(t, slot) >= afterThree }, feedWait, 10*time.Millisecond,
		"with nothing pending the slot follows the server")
	require.Len(t, again.transactions(), 2)
}

// While the handler holds a transaction, the feed keeps the connection:
// the transactions settled meanwhile are confirmed.
func TestLogFeedConfirmsWhileHandlerBlocks(t *testing.T) {
	t.Parallel()
	env := newFeedEnv(t, nil)
	h := &recorder{hold: make(chan struct{})}
	run(t, env.feed(t, postgres.LogFeedConfig{StatusInterval: 20 * time.Millisecond}), h)
	require.Eventually(t, h.reading, feedWait, 10*time.Millisecond)

	beforeOne := env.walInsertLSN(t)
	one := env.write(t, outbox.NewJSON("One", []byte(`1`)))
	two := env.write(t, outbox.NewJSON("Two", []byte(`2`)))
	afterTwo := env.walInsertLSN(t)
	txs := waitTransactions(t, h, 1)
	txs[0].Settled() // while Transaction still blocks

	slot := env.table + "_relay"
	require.Eventually(t, func() bool { return env.slotConfirmed(t, slot) > beforeOne }, feedWait, 10*time.Millisecond)
	// The position may pass keepalive positions inside the second
	// transaction, which the slot streams again as long as it stays
	// before its commit's end.
	require.Less(t, env.slotConfirmed(t, slot), afterTwo, "confirmed past the transaction not settled")
	require.Len(t, h.transactions(), 1, "a second transaction came while the first was held")
	close(h.hold)
	require.Equal(t, [][]string{one, two}, ids(waitTransactions(t, h, 2)))
}

// A second feed of the slot stands by while the first reads it, and
// takes over when the first stops: from the first's last settled
// transaction.
func TestLogFeedStandbyTakesOver(t *testing.T) {
	t.Parallel()
	env := newFeedEnv(t, nil)
	cfg := postgres.LogFeedConfig{StatusInterval: 20 * time.Millisecond, StandbyRetry: 20 * time.Millisecond}
	active, standby := &recorder{}, &recorder{}
	first := run(t, env.feed(t, cfg), active)
	require.Eventually(t, active.reading, feedWait, 10*time.Millisecond)
	run(t, env.feed(t, cfg), standby)
	require.Eventually(t, func() bool { return len(standby.readingCalls()) > 0 }, feedWait, 10*time.Millisecond)
	require.Equal(t, []bool{false}, standby.readingCalls())

	one := env.write(t, outbox.NewJSON("One", []byte(`1`)))
	require.Equal(t, [][]string{one}, ids(waitTransactions(t, active, 1)))
	require.Empty(t, standby.transactions())

	require.NoError(t, first.stop())
	require.Eventually(t, standby.reading, feedWait, 10*time.Millisecond)
	two := env.write(t, outbox.NewJSON("Two", []byte(`2`)))
	require.Equal(t, [][]string{one, two}, ids(waitTransactions(t, standby, 2)), "the unsettled transaction comes again")
	require.Equal(t, []bool{false, true}, standby.readingCalls())
}

// A slot dropped while the feed reads it is created again: Covered then
// tells that the events committed before the new slot are the claims',
// and the stream goes on with those after it.
func TestLogFeedCreatesDroppedSlotAgain(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(time.Now())
	env := newFeedEnv(t, clock)
	h := &recorder{}
	run(t, env.feed(t, postgres.LogFeedConfig{Clock: clock}), h)
	require.Eventually(t, h.reading, feedWait, 10*time.Millisecond)
	one := env.write(t, outbox.NewJSON("One", []byte(`1`)))
	waitTransactions(t, h, 1)

	slot := env.table + "_relay"
	_, err := env.pool.Exec(t.Context(), `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1`, slot)
	require.NoError(t, err)
	// The feed waits its reconnection pause, on the test's clock.
	require.True(t, clock.WaitForTimer(100*time.Millisecond, feedWait))
	require.Eventually(t, func() bool {
		_, err := env.pool.Exec(t.Context(), `SELECT pg_drop_replication_slot($1)`, slot)
		return err == nil // the reader's session may still be exiting
	}, feedWait, 10*time.Millisecond)
	gap := env.write(t, outbox.NewJSON("Gap", []byte(`2`)))
	gapEvent, ok, err := env.store.Driver().Get(t.Context(), gap[0])
	require.NoError(t, err)
	require.True(t, ok)

	clock.Advance(100 * time.Millisecond)
	require.Eventually(t, func() bool { return slices.Equal(h.readingCalls(), []bool{true, false, true}) }, feedWait, 10*time.Millisecond)
	covered := h.coveredTimes()
	require.False(t, covered[len(covered)-1].Before(gapEvent.CreatedAt), "Covered %v does not cover the event committed while the slot was gone", covered)

	three := env.write(t, outbox.NewJSON("Three", []byte(`3`)))
	require.Equal(t, [][]string{one, three}, ids(waitTransactions(t, h, 2)))
}

// Stream returns the errors that retrying cannot mend.
func TestLogFeedStopsOnConflicts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup string
		want  error
	}{
		{"publication without the table", `CREATE TABLE other (x int); CREATE PUBLICATION {publication} FOR TABLE other`, postgres.ErrLogFeedConflict},
		{"publication without inserts", `CREATE PUBLICATION {publication} FOR TABLE {table} WITH (publish = 'update')`, postgres.ErrLogFeedConflict},
		{"physical slot", `SELECT pg_create_physical_replication_slot('{slot}')`, postgres.ErrLogFeedConflict},
		{"no table", `DROP TABLE {table}`, outbox.ErrNotMigrated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := newFeedEnv(t, nil)
			setup := strings.NewReplacer("{publication}", env.table+"_log", "{table}", env.table, "{slot}", env.table+"_relay").Replace(tc.setup)
			_, err := env.pool.Exec(t.Context(), setup)
			require.NoError(t, err)
			h := &recorder{}
			err = env.feed(t, postgres.LogFeedConfig{}).Stream(t.Context(), h)
			require.ErrorIs(t, err, tc.want)
			require.Empty(t, h.readingCalls())
		})
	}
}

// A role without the REPLICATION attribute is refused, which no retry
// mends.
func TestLogFeedStopsWithoutReplicationPrivilege(t *testing.T) {
	t.Parallel()
	env := newFeedEnv(t, nil)
	role := env.table + "_role"
	_, err := env.pool.Exec(t.Context(), `CREATE ROLE `+role+` LOGIN NOREPLICATION`)
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := env.pool.Exec(context.Background(), `DROP ROLE `+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	c := env.pool.Config().ConnConfig
	feed := env.feed(t, postgres.LogFeedConfig{
		ConnString: fmt.Sprintf("host=%s port=%d dbname=%s user=%s sslmode=disable", c.Host, c.Port, c.Database, role),
	})
	err = feed.Stream(t.Context(), &recorder{})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "42501", pgErr.Code, "%v", err)
}

func TestNewLogFeedValidates(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none") // never connected
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := postgres.NewStore(pool, postgres.Config{Table: "orders_outbox"})
	require.NoError(t, err)

	feed, err := postgres.NewLogFeed(store, postgres.LogFeedConfig{})
	require.NoError(t, err)
	require.Equal(t, "orders_outbox_relay", feed.Slot())
	feed, err = postgres.NewLogFeed(store, postgres.LogFeedConfig{Slot: "relay_1", Publication: "pub_1", Reader: "me"})
	require.NoError(t, err)
	require.Equal(t, "relay_1", feed.Slot())

	for _, tc := range []struct {
		name string
		cfg  postgres.LogFeedConfig
		want error
	}{
		{"upper-case slot", postgres.LogFeedConfig{Slot: "Relay"}, postgres.ErrInvalidIdentifier},
		{"slot starting with a digit", postgres.LogFeedConfig{Slot: "1relay"}, postgres.ErrInvalidIdentifier},
		{"slot of 64 characters", postgres.LogFeedConfig{Slot: strings.Repeat("s", 64)}, postgres.ErrInvalidIdentifier},
		{"quoted publication", postgres.LogFeedConfig{Publication: `pub"x`}, postgres.ErrInvalidIdentifier},
		{"Reader with a NUL", postgres.LogFeedConfig{Reader: "a\x00b"}, outbox.ErrInvalidRequest},
		{"Reader of 129 characters", postgres.LogFeedConfig{Reader: strings.Repeat("r", 129)}, outbox.ErrInvalidRequest},
		{"negative StandbyRetry", postgres.LogFeedConfig{StandbyRetry: -1}, outbox.ErrInvalidRequest},
		{"negative StatusInterval", postgres.LogFeedConfig{StatusInterval: -1}, outbox.ErrInvalidRequest},
		{"negative CoveredDelay", postgres.LogFeedConfig{CoveredDelay: -1}, outbox.ErrInvalidRequest},
		{"bad ConnString", postgres.LogFeedConfig{ConnString: "port=notaport"}, outbox.ErrInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := postgres.NewLogFeed(store, tc.cfg)
			require.ErrorIs(t, err, tc.want)
		})
	}

	_, err = postgres.NewLogFeed(nil, postgres.LogFeedConfig{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)

	onConn, err := postgres.NewStore(&pgx.Conn{}, postgres.Config{})
	require.NoError(t, err)
	_, err = postgres.NewLogFeed(onConn, postgres.LogFeedConfig{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest, "a store on a connection needs a ConnString")
	require.ErrorContains(t, err, "ConnString")
	_, err = postgres.NewLogFeed(onConn, postgres.LogFeedConfig{ConnString: "postgres://x@127.0.0.1:1/db"})
	require.NoError(t, err)

	onTx, err := postgres.NewStore(fakeTx{}, postgres.Config{})
	require.NoError(t, err)
	_, err = postgres.NewLogFeed(onTx, postgres.LogFeedConfig{ConnString: "postgres://x@127.0.0.1:1/db"})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest, "a store on a transaction")
}

// fakeTx is a pgx.Tx for checks of types alone.
type fakeTx struct{ pgx.Tx }
