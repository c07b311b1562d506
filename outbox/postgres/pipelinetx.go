package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pipelineTx is the transaction [InTx] begins on a pool or a connection,
// built to spend as few round trips as it can. Its BEGIN goes with its
// first statement (pgx's [pgx.Batch.BeginTx]), and it holds the store's
// inserts back until it sends its next statement, its COMMIT most often,
// and sends them in the same round trip: an event costs its business
// transaction no round trip of its own, and a transaction that writes
// events alone is one round trip. Statements still run in the order they
// were made, so a later statement sees the events, and a savepoint rolled
// back by SQL takes the events written in it.
//
// A hot event's insert tells an [outbox.Writer] whether a savepoint holds
// it, which can roll back while the transaction commits. Held back, it
// tells when it is sent, and until then stands in with a mark of its own,
// which [Store.Kept] resolves (without a query when no savepoint held it).
//
// Once the transaction has opened a savepoint through Begin, or handed out
// its connection or large objects, whose statements it does not see,
// events are written at once, as in any other transaction.
type pipelineTx struct {
	conn    *pgx.Conn
	tx      pgx.Tx // nil until the BEGIN has been sent
	release func() // gives conn back to its pool
	held    []heldInsert
	marks   []uint64 // the savepoint marks of the hot inserts held back, 0 until sent
	direct  bool     // no insert is held back any more
	err     error    // of what was sent when the connection was handed out
	ended   bool
}

// heldInsert is an insert of store's, waiting for the next statement.
type heldInsert struct {
	store *Store
	sql   string
	args  []any
	mark  int // where the insert's savepoint mark goes in marks; -1: it returns none
}

// heldMark flags the stand-in mark of an insert held back, in the bit that
// a savepoint mark (a transaction id: 32 bits of epoch, 32 of counter)
// does not reach; the others give its place in marks.
const heldMark = 1 << 63

// beginPipeline returns a pipelineTx on db when db is a pool or a
// connection; ok is false for any other DB, whose transaction commits
// through its own Commit.
func beginPipeline(ctx context.Context, db DB) (_ pgx.Tx, ok bool, err error) {
	switch db := db.(type) {
	case *pgxpool.Pool:
		// Acquired here, not by db.Begin, so that the connection goes
		// back to the pool after a COMMIT the transaction sent itself.
		conn, err := db.Acquire(ctx)
		if err != nil {
			return nil, true, err
		}
		return &pipelineTx{conn: conn.Conn(), release: conn.Release}, true, nil
	case *pgx.Conn:
		return &pipelineTx{conn: db, release: func() {}}, true, nil
	}
	return nil, false, nil
}

// hold keeps an insert back, or reports false when it must run at once.
// With withMark, sql returns the savepoint mark, and hold a stand-in.
func (t *pipelineTx) hold(s *Store, sql string, args []any, withMark bool) (mark uint64, ok bool) {
	if t.direct || t.ended {
		return 0, false
	}
	h := heldInsert{store: s, sql: sql, args: args, mark: -1}
	if withMark {
		h.mark = len(t.marks)
		t.marks = append(t.marks, 0)
		mark = heldMark | uint64(h.mark)
	}
	t.held = append(t.held, h)
	return mark, true
}

// savepointMark resolves mark, a stand-in from hold, to the one its insert
// returned; an insert still held back goes with the COMMIT, which commits
// any savepoint still open: 0. Other marks are returned as they are.
func (t *pipelineTx) savepointMark(mark uint64) uint64 {
	if mark&heldMark == 0 {
		return mark
	}
	return t.marks[mark&^heldMark]
}

// send sends, in one round trip, the BEGIN if it has not been sent, the
// held inserts, and then sql unless it is empty. It returns the error of
// the first statement that failed, an insert's wrapped as its store's
// Insert wraps it, or the tag of the last one.
func (t *pipelineTx) send(ctx context.Context, sql string, args ...any) (tag pgconn.CommandTag, err error) {
	if t.tx != nil && len(t.held) == 0 {
		if sql == "" {
			return tag, nil
		}
		return t.tx.Exec(ctx, sql, args...)
	}
	batch := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(t.held)+2)}
	first := 0 // the first held insert's place in the batch
	if t.tx == nil {
		batch.BeginTx(pgx.TxOptions{})
		first = 1
	}
	held := t.held
	t.held = nil
	for _, h := range held {
		batch.Queue(h.sql, h.args...)
	}
	if sql != "" {
		batch.Queue(sql, args...)
	}
	results := t.conn.SendBatch(ctx, batch)
	if t.tx == nil {
		t.tx = results.Tx() // closed by results.Close if the BEGIN failed
	}
	for i := range batch.Len() {
		var h *heldInsert
		if k := i - first; k >= 0 && k < len(held) {
			h = &held[k]
		}
		if h != nil && h.mark >= 0 {
			var mark int64
			err = results.QueryRow().Scan(&mark)
			t.marks[h.mark] = uint64(mark)
		} else {
			tag, err = results.Exec()
		}
		if err != nil {
			if h != nil {
				err = h.store.insertError(err)
			}
			break
		}
	}
	if closeErr := results.Close(); err == nil {
		err = closeErr
	}
	return tag, err
}

// begun sends the BEGIN, when it has not been sent, and the held inserts.
func (t *pipelineTx) begun(ctx context.Context) error {
	_, err := t.send(ctx, "")
	return err
}

// goDirect sends the BEGIN and the held inserts, and has every later
// insert written at once.
func (t *pipelineTx) goDirect(ctx context.Context) error {
	t.direct = true
	return t.begun(ctx)
}

// Begin opens a savepoint, after the held inserts.
func (t *pipelineTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if t.ended {
		return nil, pgx.ErrTxClosed
	}
	if err := t.goDirect(ctx); err != nil {
		return nil, err
	}
	return t.tx.Begin(ctx)
}

// Commit sends the held inserts with the COMMIT, and gives the connection
// back to its pool. A transaction that sent nothing has nothing to commit.
func (t *pipelineTx) Commit(ctx context.Context) error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	t.ended = true
	defer t.release()
	if t.err != nil {
		_ = t.rollback(ctx)
		return t.err
	}
	if t.tx == nil && len(t.held) == 0 {
		return nil
	}
	if len(t.held) == 0 {
		return t.tx.Commit(ctx)
	}
	tag, err := t.send(ctx, "commit")
	if err != nil {
		// A statement before the COMMIT failed, so the COMMIT did not
		// run: the transaction is still open, aborted.
		if t.conn.PgConn().TxStatus() != 'I' {
			_ = t.rollback(ctx)
		}
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Rollback drops the held inserts and rolls back, and gives the
// connection back to its pool.
func (t *pipelineTx) Rollback(ctx context.Context) error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	t.ended = true
	defer t.release()
	t.held = nil
	return t.rollback(ctx)
}

// rollback rolls back what the server began.
func (t *pipelineTx) rollback(ctx context.Context) error {
	if t.tx == nil {
		return nil
	}
	err := t.tx.Rollback(ctx)
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil // the BEGIN failed, or the COMMIT went through
	}
	return err
}

// Exec runs sql after the BEGIN and the held inserts, in the same round
// trip.
func (t *pipelineTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.ended {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return t.send(ctx, sql, args...)
}

// Query runs sql after the BEGIN and the held inserts.
func (t *pipelineTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.ended {
		return nil, pgx.ErrTxClosed
	}
	if err := t.begun(ctx); err != nil {
		return nil, err
	}
	return t.tx.Query(ctx, sql, args...)
}

// QueryRow runs sql after the BEGIN and the held inserts.
func (t *pipelineTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.ended {
		return errRow{pgx.ErrTxClosed}
	}
	if err := t.begun(ctx); err != nil {
		return errRow{err}
	}
	return t.tx.QueryRow(ctx, sql, args...)
}

// SendBatch sends b after the BEGIN and the held inserts.
func (t *pipelineTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.ended {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	if err := t.begun(ctx); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return t.tx.SendBatch(ctx, b)
}

// CopyFrom copies after the BEGIN and the held inserts.
func (t *pipelineTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error) {
	if t.ended {
		return 0, pgx.ErrTxClosed
	}
	if err := t.begun(ctx); err != nil {
		return 0, err
	}
	return t.tx.CopyFrom(ctx, table, columns, rows)
}

// Prepare prepares sql, on the connection: it sends no held insert.
func (t *pipelineTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if t.ended {
		return nil, pgx.ErrTxClosed
	}
	return t.conn.Prepare(ctx, name, sql)
}

// LargeObjects hands out large objects, whose statements the transaction
// does not see: the BEGIN and the held inserts are sent first, and later
// inserts at once.
func (t *pipelineTx) LargeObjects() pgx.LargeObjects {
	if t.handOut(); t.ended || t.tx == nil {
		return closedTx().LargeObjects()
	}
	return t.tx.LargeObjects()
}

// Conn hands out the connection, whose statements the transaction does not
// see: the BEGIN and the held inserts are sent first, and later inserts at
// once.
func (t *pipelineTx) Conn() *pgx.Conn {
	t.handOut()
	return t.conn
}

// handOut goes direct before the transaction's connection is handed out.
// Neither Conn nor LargeObjects returns an error: one in what they send
// fails the commit, as a failed statement would.
func (t *pipelineTx) handOut() {
	if t.ended || t.direct {
		return
	}
	if err := t.goDirect(context.Background()); err != nil {
		t.err = err
	}
}

// closedTx is a transaction that has ended, whose every method fails with
// pgx.ErrTxClosed.
func closedTx() pgx.Tx {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	return pgx.FailedBatchResults(b, pgx.ErrTxClosed).Tx()
}

// errRow is a row that could not be read.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
