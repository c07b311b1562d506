package postgres_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
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
// BEGIN and the events with the next statement, the COMMIT most often. A
// transaction that writes an event alone is one round trip, where begin,
// insert and commit one by one take three. A statement of the caller's
// goes alone, as pgx sends it: the BEGIN and the events go before it, or
// with the COMMIT.
func TestInTxSendsEventsWithTheNextStatement(t *testing.T) {
	t.Parallel()
	for _, mode := range queryModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			const withOrder = 3
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
				{"an order, then its event", withOrder, func(ctx context.Context, tx pgx.Tx) error {
					return errors.Join(insertOrder(ctx, tx), write(ctx, tx, storetest.JSONEvent(1)))
				}},
				{"an event, then its order", withOrder, func(ctx context.Context, tx pgx.Tx) error {
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
	hot := newHotRecorder()
	store, writer := storeAndWriter(t, pool, outbox.WriterConfig{HotPath: hot})
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
	require.Equal(t, []string{"kept before the savepoint", "released in another savepoint"}, hot.delivered())
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
		rows, err := leaked.Query(ctx, `SELECT 1`)
		require.ErrorIs(t, err, pgx.ErrTxClosed)
		if rows != nil {
			rows.Close()
		}
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

// plainPool is a pool that InTx does not recognise: it begins pgx's own
// transaction on it, as before the change.
type plainPool struct{ *pgxpool.Pool }

// likePgx runs scenario in each of modes, with InTx's transaction and with
// pgx's (InTx on a plainPool), which it must behave like, each on a fresh
// pool of one connection.
func likePgx(t *testing.T, modes []pgx.QueryExecMode, scenario func(t *testing.T, pool *pgxpool.Pool, db postgres.DB)) {
	for _, mode := range modes {
		for _, kind := range []string{"pgx", "pipelineTx"} {
			t.Run(mode.String()+"/"+kind, func(t *testing.T) {
				t.Parallel()
				pool, _ := countedPool(t, mode)
				var db postgres.DB = pool
				if kind == "pgx" {
					db = plainPool{pool}
				}
				scenario(t, pool, db)
			})
		}
	}
}

// orderCommittedWithItsEvent checks that one order and its event were
// committed, and that an event not committed was not handed to the hot
// path.
func orderCommittedWithItsEvent(t *testing.T, pool *pgxpool.Pool, hot *hotRecorder) {
	t.Helper()
	orders, events := committed(t, pool)
	assert.Equal(t, 1, orders)
	assert.Equal(t, 1, events, "the order committed without its event")
	if events == 0 {
		assert.Empty(t, hot.delivered(), "the hot path was handed an event that was never committed")
	}
}

// committed returns the committed orders and events.
func committed(t *testing.T, pool *pgxpool.Pool) (orders, events int) {
	t.Helper()
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM outbox_event)`).Scan(&orders, &events))
	return orders, events
}

// A statement whose context has ended fails before anything reaches the
// server; a pgx transaction is left as it was, and the caller may go on
// (an optional step with a deadline). As InTx's first statement it
// carried the BEGIN, which did not run either: the next statement sends
// it, so that nothing after it escapes the rollback.
func TestInTxFirstStatementThatNeverLeftKeepsTheTransaction(t *testing.T) {
	t.Parallel()
	likePgx(t, queryModes, func(t *testing.T, pool *pgxpool.Pool, db postgres.DB) {
		store, writer := storeAndWriter(t, db, outbox.WriterConfig{})
		businessRule := errors.New("business rule failed")
		err := store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			optional, cancel := context.WithCancel(ctx)
			cancel() // its deadline passed already
			_, err := tx.Exec(optional, `SELECT pg_advisory_xact_lock(1)`)
			require.ErrorIs(t, err, context.Canceled)
			if _, err := writer.Write(ctx, tx, named("e1", "one")); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ('a')`); err != nil {
				return err
			}
			return businessRule // roll back
		})
		require.ErrorIs(t, err, businessRule)
		orders, events := committed(t, pool)
		assert.Zero(t, orders, "an order of a rolled-back transaction committed")
		assert.Zero(t, events, "an event of a rolled-back transaction committed")
	})
}

// The same statement later in the transaction: the event held back to go
// with it stays held, for the commit, and is delivered only once it is
// committed.
func TestInTxStatementThatNeverLeftKeepsTheHeldEvents(t *testing.T) {
	t.Parallel()
	likePgx(t, queryModes, func(t *testing.T, pool *pgxpool.Pool, db postgres.DB) {
		hot := newHotRecorder()
		store, writer := storeAndWriter(t, db, outbox.WriterConfig{HotPath: hot})
		err := store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ('a')`); err != nil {
				return err
			}
			if _, err := writer.Write(ctx, tx, named("e1", "one")); err != nil {
				return err
			}
			optional, cancel := context.WithCancel(ctx)
			cancel()
			_, err := tx.Exec(optional, `SELECT pg_advisory_xact_lock(1)`)
			require.ErrorIs(t, err, context.Canceled) // an optional step: go on
			return nil
		})
		require.NoError(t, err)
		orderCommittedWithItsEvent(t, pool, hot)
	})
}

// An optional step (see TestSavepointWhoseContextEndedIsRolledBack): a
// savepoint InTx under a deadline, which the transaction goes on without
// when it fails. With the deadline passed as the step begins, the event
// held back before it stays held.
func TestInTxOptionalStepWhoseDeadlinePassedKeepsTheHeldEvents(t *testing.T) {
	t.Parallel()
	likePgx(t, queryModes[:1], func(t *testing.T, pool *pgxpool.Pool, db postgres.DB) {
		hot := newHotRecorder()
		store, writer := storeAndWriter(t, db, outbox.WriterConfig{HotPath: hot})
		var stepErr error
		err := store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ('a')`); err != nil {
				return err
			}
			if _, err := writer.Write(ctx, tx, named("order-created", "a")); err != nil {
				return err
			}
			optional, cancel := context.WithCancel(ctx)
			cancel() // the deadline of the optional step passed already
			stepErr = savepoint(t, tx).InTx(optional, func(ctx context.Context, sp pgx.Tx) error {
				_, err := sp.Exec(ctx, `SELECT 1`)
				return err
			})
			return nil // the transaction goes on without the optional step
		})
		require.NoError(t, err)
		require.ErrorIs(t, stepErr, context.Canceled)
		orderCommittedWithItsEvent(t, pool, hot)
	})
}

// pgx's Exec takes a QueryExecMode as its first argument (how a statement
// is sent past PgBouncer, say), which a pgx.Batch does not.
func TestInTxExecTakesAQueryExecMode(t *testing.T) {
	t.Parallel()
	likePgx(t, queryModes, func(t *testing.T, pool *pgxpool.Pool, db postgres.DB) {
		store, _ := storeAndWriter(t, db, outbox.WriterConfig{})
		require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, pgx.QueryExecModeSimpleProtocol, "a")
			return err
		}))
		orders, _ := committed(t, pool)
		require.Equal(t, 1, orders)
	})
}

// pgx's Exec sends a statement without arguments in the simple protocol,
// which takes several statements in one string; a batch in the extended
// protocol would refuse them.
func TestInTxExecTakesSeveralStatementsWithoutArguments(t *testing.T) {
	t.Parallel()
	likePgx(t, queryModes, func(t *testing.T, pool *pgxpool.Pool, db postgres.DB) {
		store, _ := storeAndWriter(t, db, outbox.WriterConfig{})
		require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'; INSERT INTO orders (id) VALUES ('a')`)
			return err
		}))
		orders, _ := committed(t, pool)
		require.Equal(t, 1, orders)
	})
}

// A statement prepared with tx.Prepare runs by its name with tx.Exec in
// every mode on a pgx.Tx (Conn.Exec looks the name up first), which a
// batch in the simple protocol would send as SQL.
func TestInTxExecRunsAPreparedStatementByName(t *testing.T) {
	t.Parallel()
	likePgx(t, queryModes, func(t *testing.T, pool *pgxpool.Pool, db postgres.DB) {
		store, _ := storeAndWriter(t, db, outbox.WriterConfig{})
		require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Prepare(ctx, "insert_order", `INSERT INTO orders (id) VALUES ($1)`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "insert_order", "a")
			return err
		}))
		orders, _ := committed(t, pool)
		require.Equal(t, 1, orders)
	})
}

// The usual way to skip a duplicate event (a redelivered message's id)
// inside a transaction: a savepoint, rolled back when the write fails.
// From a SAVEPOINT statement on, events are written at once, so that the
// write, not the RELEASE, fails.
func TestInTxWriteInASQLSavepointFailsAtOnce(t *testing.T) {
	t.Parallel()
	likePgx(t, queryModes[:1], func(t *testing.T, pool *pgxpool.Pool, db postgres.DB) {
		store, writer := storeAndWriter(t, db, outbox.WriterConfig{})
		require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			_, err := writer.Write(ctx, tx, named("msg-1", "first delivery"))
			return err
		}))
		require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ('a')`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SAVEPOINT publish`); err != nil {
				return err
			}
			_, err := writer.Write(ctx, tx, named("msg-1", "redelivered"))
			if errors.Is(err, outbox.ErrDuplicateEvent) {
				_, err = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT publish`)
				return err
			}
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `RELEASE SAVEPOINT publish`)
			return err
		}))
		orders, _ := committed(t, pool)
		require.Equal(t, 1, orders)
	})
}

// A caller's statement that pgx fails before running its batch (cache
// statement mode prepares every new statement of a batch first) reports
// its own error, not one of the outbox insert it went with.
func TestInTxCallersStatementErrorIsItsOwn(t *testing.T) {
	t.Parallel()
	likePgx(t, queryModes[:1], func(t *testing.T, pool *pgxpool.Pool, db postgres.DB) {
		store, writer := storeAndWriter(t, db, outbox.WriterConfig{})
		var stmtErr error
		_ = store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ('a')`); err != nil {
				return err
			}
			_, err := writer.Write(ctx, tx, named("e", "x"))
			if err != nil {
				return err
			}
			_, stmtErr = tx.Exec(ctx, `UPDATE no_such_table SET x = 1`)
			return stmtErr
		})
		require.Error(t, stmtErr)
		require.NotContains(t, stmtErr.Error(), "insert into", "the caller's own UPDATE failed")
	})
}

// A first statement the server refuses aborts pgx's transaction, whether
// or not the caller goes on: the commit fails and nothing of it is kept,
// though InTx's BEGIN went in the same batch and never ran.
func TestInTxFirstStatementRefusedAbortsTheTransaction(t *testing.T) {
	t.Parallel()
	likePgx(t, queryModes, func(t *testing.T, pool *pgxpool.Pool, db postgres.DB) {
		store, writer := storeAndWriter(t, db, outbox.WriterConfig{})
		err := store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE no_such_table SET x = $1`, 1)
			require.Error(t, err)
			_, _ = tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, "a") // the caller goes on
			_, _ = writer.Write(ctx, tx, named("e1", "one"))
			return nil
		})
		require.Error(t, err, "the commit of an aborted transaction")
		orders, events := committed(t, pool)
		require.Zero(t, orders)
		require.Zero(t, events)
	})
}

// A statement whose argument cannot be encoded fails in pgx before
// anything is sent; the transaction goes on. (In a batch, in the cache
// modes, it would close the connection.)
func TestInTxExecOfAnUnencodableArgumentKeepsTheTransaction(t *testing.T) {
	t.Parallel()
	likePgx(t, queryModes[:1], func(t *testing.T, pool *pgxpool.Pool, db postgres.DB) {
		hot := newHotRecorder()
		store, writer := storeAndWriter(t, db, outbox.WriterConfig{HotPath: hot})
		err := store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, "a"); err != nil {
				return err
			}
			if _, err := writer.Write(ctx, tx, named("e1", "one")); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, uint64(1<<63)) // out of range for bigint: pgx refuses to encode it
			require.Error(t, err)
			return nil // an optional step: go on
		})
		require.NoError(t, err)
		orders, events := committed(t, pool)
		assert.Equal(t, 1, orders)
		assert.Equal(t, 1, events)
		assert.Equal(t, []string{"e1 one"}, hot.delivered())
	})
}

// The same as the first statement.
func TestInTxFirstExecOfAnUnencodableArgumentKeepsTheTransaction(t *testing.T) {
	t.Parallel()
	likePgx(t, queryModes, func(t *testing.T, pool *pgxpool.Pool, db postgres.DB) {
		store, _ := storeAndWriter(t, db, outbox.WriterConfig{})
		err := store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, make(chan int))
			require.Error(t, err)
			_, err = tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, "a")
			return err
		})
		require.NoError(t, err)
		orders, _ := committed(t, pool)
		assert.Equal(t, 1, orders)
	})
}

// A Prepare the server refuses aborts pgx's transaction, and InTx's, which
// sends its BEGIN first.
func TestInTxRefusedPrepareAbortsTheTransaction(t *testing.T) {
	t.Parallel()
	likePgx(t, queryModes[:1], func(t *testing.T, pool *pgxpool.Pool, db postgres.DB) {
		hot := newHotRecorder()
		store, writer := storeAndWriter(t, db, outbox.WriterConfig{HotPath: hot})
		_ = store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			if _, err := writer.Write(ctx, tx, named("e1", "one")); err != nil {
				return err
			}
			_, err := tx.Prepare(ctx, "p", `SELECT * FROM no_such_table`)
			require.Error(t, err) // an optional statement: go on
			return nil
		})
		orders, events := committed(t, pool)
		assert.Zero(t, orders+events, "pgx's transaction is aborted by the refused Prepare")
		if events == 0 {
			assert.Empty(t, hot.delivered())
		}
	})
}

// pgx's Exec sends a statement whose QueryRewriter leaves no argument in
// the simple protocol (several statements in one string).
func TestInTxExecOfNamedArgsWithoutArguments(t *testing.T) {
	t.Parallel()
	likePgx(t, queryModes[:1], func(t *testing.T, pool *pgxpool.Pool, db postgres.DB) {
		store, _ := storeAndWriter(t, db, outbox.WriterConfig{})
		require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'; INSERT INTO orders (id) VALUES ('a')`, pgx.NamedArgs{})
			return err
		}))
		orders, _ := committed(t, pool)
		require.Equal(t, 1, orders)
	})
}

// Conn hands out the connection after sending the held inserts under
// InTx's context: an insert waiting on a lock (the same event id written
// by a transaction still open) gives up at its deadline, as pgx's Write
// does.
func TestInTxConnHonoursTheDeadline(t *testing.T) {
	t.Parallel()
	likePgx(t, queryModes[:1], func(t *testing.T, pool *pgxpool.Pool, _ postgres.DB) {
		cfg := pool.Config()
		cfg.MaxConns = 2
		big, err := pgxpool.NewWithConfig(t.Context(), cfg)
		require.NoError(t, err)
		defer big.Close()
		var db postgres.DB = big
		if t.Name()[len(t.Name())-3:] == "pgx" {
			db = plainPool{big}
		}
		store, writer := storeAndWriter(t, db, outbox.WriterConfig{})
		other, err := big.Begin(t.Context())
		require.NoError(t, err)
		_, err = writer.Write(t.Context(), other, named("same", "other"))
		require.NoError(t, err)
		time.AfterFunc(3*time.Second, func() { _ = other.Rollback(context.Background()) })

		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_ = store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := writer.Write(ctx, tx, named("same", "mine")); err != nil {
				return err
			}
			_, err := tx.Conn().Exec(ctx, `SELECT 1`)
			return err
		})
		assert.Less(t, time.Since(start), 2*time.Second, "InTx outlived its deadline")
	})
}
