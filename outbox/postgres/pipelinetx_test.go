package postgres_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// countedConn counts the writes on a connection: pgx writes once for each
// round trip, however many statements go in it.
type countedConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countedConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// countedPool returns a pool of one connection in mode on a fresh
// database with an orders table, and the count of its round trips.
func countedPool(t *testing.T, mode pgx.QueryExecMode) (*pgxpool.Pool, *atomic.Int64) {
	cfg, err := pgxpool.ParseConfig(testdb.URL(t))
	require.NoError(t, err)
	cfg.MaxConns = 1
	cfg.ConnConfig.DefaultQueryExecMode = mode
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	writes, dial := new(atomic.Int64), cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countedConn{Conn: conn, writes: writes}, nil
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(t.Context(), `CREATE TABLE orders (id text PRIMARY KEY)`)
	require.NoError(t, err)
	return pool, writes
}

// storeAndWriter returns a store on db and a writer through it.
func storeAndWriter(t *testing.T, db postgres.DB, cfg outbox.WriterConfig) (*postgres.Store, *outbox.Writer[pgx.Tx]) {
	store, err := postgres.NewStore(db, postgres.Config{})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, cfg)
	require.NoError(t, err)
	return store, writer
}

// An event costs its business transaction no round trip: InTx sends the
// BEGIN with the first statement and the event with the next one, the
// COMMIT most often. A transaction that writes an event alone is one
// round trip, where begin, insert and commit one by one take three.
func TestInTxSendsEventsWithTheNextStatement(t *testing.T) {
	t.Parallel()
	for _, mode := range queryModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			pool, writes := countedPool(t, mode)
			store, writer := storeAndWriter(t, pool, outbox.WriterConfig{})
			write := func(ctx context.Context, tx pgx.Tx, events ...outbox.Envelope) error {
				_, err := writer.Write(ctx, tx, events...)
				return err
			}
			order := 0
			insertOrder := func(ctx context.Context, tx pgx.Tx) error {
				order++
				_, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, strconv.Itoa(order))
				return err
			}
			for _, c := range []struct {
				name  string
				trips int64
				fn    func(ctx context.Context, tx pgx.Tx) error
			}{
				{"nothing", 0, func(context.Context, pgx.Tx) error { return nil }},
				{"an event", 1, func(ctx context.Context, tx pgx.Tx) error {
					return write(ctx, tx, storetest.JSONEvent(1))
				}},
				{"three events", 1, func(ctx context.Context, tx pgx.Tx) error {
					return write(ctx, tx, storetest.JSONEvent(1), storetest.JSONEvent(2), storetest.JSONEvent(3))
				}},
				{"an order, then its event", 2, func(ctx context.Context, tx pgx.Tx) error {
					return errors.Join(insertOrder(ctx, tx), write(ctx, tx, storetest.JSONEvent(1)))
				}},
				{"an event, then its order", 2, func(ctx context.Context, tx pgx.Tx) error {
					return errors.Join(write(ctx, tx, storetest.JSONEvent(1)), insertOrder(ctx, tx))
				}},
			} {
				var trips [2]int64 // the first run prepares the statements
				for i := range trips {
					before := writes.Load()
					require.NoError(t, store.InTx(t.Context(), c.fn), c.name)
					trips[i] = writes.Load() - before
				}
				require.Equal(t, c.trips, trips[1], "round trips of a transaction writing %s", c.name)
			}
			var rows int
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event`).Scan(&rows))
			require.Equal(t, 2*(1+3+1+1), rows, "every event committed")
		})
	}
}

// Statements run in the order they were made: one after an event sees it,
// as does a statement on the transaction's connection.
func TestInTxLaterStatementsSeeTheEvents(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, writer := storeAndWriter(t, pool, outbox.WriterConfig{})
	count := func(ctx context.Context, q interface {
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}) int {
		var n int
		require.NoError(t, q.QueryRow(ctx, `SELECT count(*) FROM outbox_event`).Scan(&n))
		return n
	}
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, storetest.JSONEvent(1))
		require.NoError(t, err)
		require.Equal(t, 1, count(ctx, tx))
		_, err = writer.Write(ctx, tx, storetest.JSONEvent(2))
		require.NoError(t, err)
		require.Equal(t, 2, count(ctx, tx.Conn()), "the connection handed out")
		_, err = writer.Write(ctx, tx, storetest.JSONEvent(3)) // written at once
		require.NoError(t, err)
		require.Equal(t, 3, count(ctx, tx.Conn()))
		return nil
	}))
	require.Equal(t, 3, count(t.Context(), pool))
}

// A savepoint opened and rolled back with SQL takes the events written in
// it, hot ones included: those are not handed to the hot path, whatever
// the SQL looks like. Those of a savepoint released are.
func TestInTxSavepointRolledBackBySQLTakesItsEvents(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	hot := &hotRecorder{}
	store, writer := storeAndWriter(t, pool, outbox.WriterConfig{ClaimOwner: "relay", AfterCommit: hot.hook})
	exec := func(ctx context.Context, tx pgx.Tx, sql string) {
		_, err := tx.Exec(ctx, sql)
		require.NoError(t, err)
	}
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, named("kept", "before the savepoint"))
		require.NoError(t, err)
		exec(ctx, tx, "/* an optional step */ SAVEPOINT optional")
		_, err = writer.Write(ctx, tx, named("dropped", "in the savepoint"))
		require.NoError(t, err)
		exec(ctx, tx, "ROLLBACK TO SAVEPOINT optional")
		exec(ctx, tx, "SAVEPOINT another")
		_, err = writer.Write(ctx, tx, named("released", "in another savepoint"))
		require.NoError(t, err)
		exec(ctx, tx, "RELEASE SAVEPOINT another")
		return nil
	}))
	require.Equal(t, []string{"kept before the savepoint", "released in another savepoint"}, hot.got)
	var ids []string
	rows, err := pool.Query(t.Context(), `SELECT event_id FROM outbox_event ORDER BY seq`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"kept", "released"}, ids)
}

// An event's insert that fails reports with the statement it went with,
// the commit or the next one, and the transaction rolls back, business
// rows and all; the connection goes back to the pool, ready for the next.
func TestInTxEventThatFailsFailsTheTransaction(t *testing.T) {
	t.Parallel()
	pool, _ := countedPool(t, pgx.QueryExecModeCacheStatement)
	store, writer := storeAndWriter(t, pool, outbox.WriterConfig{})
	ctx := t.Context()
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, named("taken", "first"))
		return err
	}))

	err := store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ('a')`); err != nil {
			return err
		}
		_, err := writer.Write(ctx, tx, named("taken", "again"))
		return err
	})
	require.ErrorIs(t, err, outbox.ErrDuplicateEvent, "reported by the commit")

	var next error
	err = store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := writer.Write(ctx, tx, named("taken", "again")); err != nil {
			return err
		}
		_, next = tx.Exec(ctx, `INSERT INTO orders (id) VALUES ('b')`)
		return next
	})
	require.ErrorIs(t, next, outbox.ErrDuplicateEvent, "reported by the next statement")
	require.ErrorIs(t, err, outbox.ErrDuplicateEvent)

	var orders, events int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM outbox_event)`).Scan(&orders, &events))
	require.Zero(t, orders, "a business row committed without its event")
	require.Equal(t, 1, events)
	require.EqualValues(t, 1, pool.Stat().TotalConns(), "the one connection kept")
}

// A transaction used after InTx returns fails as pgx's does, whatever it
// sent: nothing, or its COMMIT with an event.
func TestInTxTransactionIsClosedAfterward(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	store, writer := storeAndWriter(t, pool, outbox.WriterConfig{})
	ctx := t.Context()
	for _, withEvent := range []bool{false, true} {
		var leaked pgx.Tx
		require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			leaked = tx
			if withEvent {
				_, err := writer.Write(ctx, tx, storetest.JSONEvent(1))
				return err
			}
			return nil
		}))
		_, err := leaked.Exec(ctx, `SELECT 1`)
		require.ErrorIs(t, err, pgx.ErrTxClosed)
		require.ErrorIs(t, leaked.QueryRow(ctx, `SELECT 1`).Scan(new(int)), pgx.ErrTxClosed)
		_, err = leaked.Query(ctx, `SELECT 1`)
		require.ErrorIs(t, err, pgx.ErrTxClosed)
		require.ErrorIs(t, leaked.SendBatch(ctx, &pgx.Batch{}).Close(), pgx.ErrTxClosed)
		_, err = leaked.Begin(ctx)
		require.ErrorIs(t, err, pgx.ErrTxClosed)
		objects := leaked.LargeObjects()
		_, err = objects.Create(ctx, 0)
		require.ErrorIs(t, err, pgx.ErrTxClosed)
		require.ErrorIs(t, leaked.Commit(ctx), pgx.ErrTxClosed)
		require.ErrorIs(t, leaked.Rollback(ctx), pgx.ErrTxClosed)
	}
}

// InTx on a connection, rather than a pool, sends its events with the
// commit too, and leaves the connection outside any transaction.
func TestInTxOnAConnection(t *testing.T) {
	t.Parallel()
	conn, err := pgx.Connect(t.Context(), testdb.URL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	store, writer := storeAndWriter(t, conn, outbox.WriterConfig{})
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, storetest.JSONEvent(1))
		return err
	}))
	require.Equal(t, byte('I'), conn.PgConn().TxStatus())
	var rows int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM outbox_event`).Scan(&rows))
	require.Equal(t, 1, rows)
}
