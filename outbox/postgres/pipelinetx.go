package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pipelineTx is the transaction [outbox.Store.InTx] begins on a pool or a
// connection, built to spend as few round trips as it can. It holds its
// BEGIN and the store's inserts back until it sends something else, and
// sends them with that in one round trip (pgx's [pgx.Batch.BeginTx]): with
// its COMMIT most often, or just before a statement of the caller's, which
// goes on its own, as pgx's Exec or Query sends it. An event costs its business
// transaction no round trip of its own, and a transaction that writes
// events alone is one round trip. Statements still run in the order they
// were made, so a later statement sees the events, and a savepoint rolled
// back takes the events written in it. A statement that fails leaves the
// transaction as it would leave pgx's: aborted if the server refused it,
// as it was (held inserts included) if it never reached the server.
//
// A hot event's insert tells an [outbox.Writer] whether a savepoint holds
// it, which can roll back while the transaction commits. Held back, it
// tells when it is sent, and until then stands in with a mark of its own,
// which the driver's Kept resolves (without a query when no savepoint held
// it).
//
// From a savepoint (opened through Begin, or by a statement that begins
// with SAVEPOINT) on, events are written at once, as in any other
// transaction, so that a write's error (a duplicate id) comes from the
// write, for the savepoint to undo; and from a call of Conn or
// LargeObjects on, whose statements the transaction does not see.
type pipelineTx struct {
	conn    *pgx.Conn
	tx      pgx.Tx // nil until the BEGIN has been sent
	release func() // gives conn back to its pool
	held    []heldInsert
	marks   []uint64 // the savepoint marks of the hot inserts held back, 0 until sent
	direct  bool     // no insert is held back any more
	err     error    // what failed the transaction, which later statements and the commit return
	ended   bool
	// ctx is InTx's, for what Conn and LargeObjects send: pgx gives them
	// no context of their own.
	ctx context.Context
}

// heldInsert is an insert of driver's, waiting for the next statement.
type heldInsert struct {
	driver  *driver
	sql     string
	markSQL string // the same insert returning its savepoint mark; "" when none is asked for
	args    []any
	mark    int // where the insert's savepoint mark goes in marks; -1: it returns none
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
		return &pipelineTx{conn: conn.Conn(), release: conn.Release, ctx: ctx}, true, nil
	case *pgx.Conn:
		return &pipelineTx{conn: db, release: func() {}, ctx: ctx}, true, nil
	}
	return nil, false, nil
}

// hold keeps an insert back, or reports false when it must run at once.
// With markSQL, the same insert returning its savepoint mark, hold returns
// a stand-in for the mark.
func (t *pipelineTx) hold(d *driver, sql, markSQL string, args []any) (mark uint64, ok bool) {
	if t.direct || t.ended {
		return 0, false
	}
	h := heldInsert{driver: d, sql: sql, markSQL: markSQL, args: args, mark: -1}
	if markSQL != "" {
		h.mark = len(t.marks)
		t.marks = append(t.marks, 0)
		mark = heldMark | uint64(h.mark)
	}
	t.held = append(t.held, h)
	return mark, true
}

// savepointMark resolves mark, a stand-in from hold, to the one its insert
// returned; an insert still held back goes with the COMMIT, which commits
// any savepoint still open, and asks for no mark: 0. Other marks are
// returned as they are.
func (t *pipelineTx) savepointMark(mark uint64) uint64 {
	if mark&heldMark == 0 {
		return mark
	}
	return t.marks[mark&^heldMark]
}

// send sends, in one round trip, the BEGIN if it has not been sent, the
// held inserts, and with commit the COMMIT. It returns the error of the
// first statement that failed, an insert's wrapped as its store's Insert
// wraps it, or the tag of the last one.
func (t *pipelineTx) send(ctx context.Context, commit bool) (tag pgconn.CommandTag, err error) {
	if t.tx != nil && len(t.held) == 0 && !commit {
		return tag, nil
	}
	batch := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(t.held)+2)}
	began := t.tx == nil
	first := 0 // the first held insert's place in the batch
	if began {
		batch.BeginTx(pgx.TxOptions{})
		first = 1
	}
	held := t.held
	t.held = nil
	// With the COMMIT, no savepoint can roll an insert back any more: a
	// mark is asked only of those that go before.
	marked := !commit
	for _, h := range held {
		if marked && h.mark >= 0 {
			batch.Queue(h.markSQL, h.args...)
		} else {
			batch.Queue(h.sql, h.args...)
		}
	}
	if commit {
		batch.Queue("commit")
	}
	results := t.conn.SendBatch(ctx, batch)
	if began {
		t.tx = results.Tx()
	}
	for i := range batch.Len() {
		var h *heldInsert
		if k := i - first; k >= 0 && k < len(held) {
			h = &held[k]
		}
		if h != nil && marked && h.mark >= 0 {
			var mark int64
			err = results.QueryRow().Scan(&mark)
			t.marks[h.mark] = uint64(mark)
		} else {
			tag, err = results.Exec()
		}
		if err != nil {
			err = blame(err, h, held)
			break
		}
	}
	if closeErr := results.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		t.failed(err, held, began)
	}
	return tag, err
}

// blame wraps err as the store of the insert it belongs to would: the
// error read for held insert h, or one pgx met preparing an insert's
// statement. Any other (the caller's statement's, the context's, the
// connection's) is returned as it is.
func blame(err error, h *heldInsert, held []heldInsert) error {
	var preparing pgx.ErrPreprocessingBatch
	if errors.As(err, &preparing) {
		for _, h := range held {
			if h.sql == preparing.SQL() || h.markSQL == preparing.SQL() {
				return h.driver.insertError(err)
			}
		}
		return err
	}
	var server *pgconn.PgError
	if h != nil && errors.As(err, &server) {
		return h.driver.insertError(err)
	}
	return err
}

// failed leaves the transaction, after a batch that failed with err, as
// pgx's would be after that statement failed. held were the batch's
// inserts; began tells whether it carried the BEGIN.
func (t *pipelineTx) failed(err error, held []heldInsert, began bool) {
	if t.conn.IsClosed() {
		return // the transaction went with the connection: what follows fails
	}
	switch status := t.conn.PgConn().TxStatus(); {
	case status == 'E':
		// The server ran the batch up to a statement that failed: the
		// transaction is aborted, as pgx's would be.
	case status == 'T' && !began:
		// Nothing reached the server (the context had ended): the
		// transaction is as it was, and the inserts wait for the next
		// statement.
		t.held = held
	case status == 'I' && began:
		// The BEGIN did not run, nor anything after it: the next statement
		// sends them again. A statement the server refused before the
		// batch ran (pgx prepares a batch's new statements first) would
		// have aborted pgx's transaction: it fails this one.
		t.tx, t.held = nil, held
		var server *pgconn.PgError
		if errors.As(err, &server) {
			t.err = err
		}
	default:
		// A state no failure of a batch leaves: fail the transaction
		// rather than guess what of it ran.
		t.err = err
	}
}

// begun sends the BEGIN, when it has not been sent, and the held inserts.
func (t *pipelineTx) begun(ctx context.Context) error {
	_, err := t.send(ctx, false)
	return err
}

// usable returns the error a statement fails with now: pgx.ErrTxClosed
// once the transaction has ended, what failed it, or nil.
func (t *pipelineTx) usable() error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	return t.err
}

// goDirect sends the BEGIN and the held inserts, and has every later
// insert written at once.
func (t *pipelineTx) goDirect(ctx context.Context) error {
	t.direct = true
	return t.begun(ctx)
}

// Begin opens a savepoint, after the held inserts.
func (t *pipelineTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.usable(); err != nil {
		return nil, err
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
		return fmt.Errorf("%w: %w", pgx.ErrTxCommitRollback, t.err)
	}
	if len(t.held) == 0 {
		if t.tx == nil {
			return nil
		}
		return t.tx.Commit(ctx)
	}
	if t.conn.PgConn().TxStatus() == 'E' {
		// A statement failed and aborted the transaction: the COMMIT
		// would roll it back, as pgx's does, and the held inserts with it.
		_ = t.rollback(ctx)
		return pgx.ErrTxCommitRollback
	}
	tag, err := t.send(ctx, true)
	if err != nil {
		// Something before the COMMIT failed, so the COMMIT did not run:
		// what the server began is still open.
		_ = t.rollback(ctx)
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

// rollback rolls back what the server began, if anything.
func (t *pipelineTx) rollback(ctx context.Context) error {
	if t.tx == nil || t.conn.IsClosed() || t.conn.PgConn().TxStatus() == 'I' {
		return nil
	}
	return t.tx.Rollback(ctx)
}

// Exec runs sql after the BEGIN and the held inserts. It goes on its own,
// as pgx's Exec sends it: pgx fails some statements (an argument it cannot
// encode) only once a batch carrying them is under way, which closes the
// connection, where its Exec leaves the transaction usable.
func (t *pipelineTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.ready(ctx, sql); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.tx.Exec(ctx, sql, args...)
}

// Query runs sql after the BEGIN and the held inserts.
func (t *pipelineTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.ready(ctx, sql); err != nil {
		return nil, err
	}
	return t.tx.Query(ctx, sql, args...)
}

// QueryRow runs sql after the BEGIN and the held inserts.
func (t *pipelineTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.ready(ctx, sql); err != nil {
		return errRow{err}
	}
	return t.tx.QueryRow(ctx, sql, args...)
}

// SendBatch sends b after the BEGIN and the held inserts.
func (t *pipelineTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		t.seeSavepoint(q.SQL)
	}
	if err := t.ready(ctx, ""); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return t.tx.SendBatch(ctx, b)
}

// CopyFrom copies after the BEGIN and the held inserts.
func (t *pipelineTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error) {
	if err := t.ready(ctx, ""); err != nil {
		return 0, err
	}
	return t.tx.CopyFrom(ctx, table, columns, rows)
}

// ready readies the transaction for sql, a statement it does not send
// itself: the BEGIN and the held inserts go first.
func (t *pipelineTx) ready(ctx context.Context, sql string) error {
	if err := t.usable(); err != nil {
		return err
	}
	t.seeSavepoint(sql)
	return t.begun(ctx)
}

// Prepare prepares sql after the BEGIN and the held inserts: a statement
// the server refuses aborts the transaction, as it aborts pgx's.
func (t *pipelineTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.ready(ctx, ""); err != nil {
		return nil, err
	}
	return t.tx.Prepare(ctx, name, sql)
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
// see: the BEGIN and the held inserts are sent first, under InTx's
// context, and later inserts at once.
func (t *pipelineTx) Conn() *pgx.Conn {
	t.handOut()
	return t.conn
}

// handOut goes direct before the transaction's connection is handed out.
// Neither Conn nor LargeObjects returns an error: a failure to send what
// was held fails the transaction, as a failed statement would.
func (t *pipelineTx) handOut() {
	if t.usable() != nil {
		return
	}
	if err := t.goDirect(t.ctx); err != nil && t.err == nil {
		t.err = err
	}
}

// seeSavepoint goes direct when sql opens a savepoint; the held inserts
// are sent before it.
func (t *pipelineTx) seeSavepoint(sql string) {
	if !t.direct && opensSavepoint(sql) {
		t.direct = true
	}
}

// opensSavepoint reports whether sql begins with SAVEPOINT, after blanks
// and comments.
func opensSavepoint(sql string) bool {
	const keyword = "savepoint"
	for {
		sql = strings.TrimLeft(sql, " \t\r\n\f")
		var end string
		switch {
		case strings.HasPrefix(sql, "--"):
			end = "\n"
		case strings.HasPrefix(sql, "/*"):
			end = "*/"
		default:
			return len(sql) >= len(keyword) && strings.EqualFold(sql[:len(keyword)], keyword)
		}
		i := strings.Index(sql, end)
		if i < 0 {
			return false
		}
		sql = sql[i+len(end):]
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
