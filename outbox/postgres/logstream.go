package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// progressTimeout bounds the write of the progress row.
const progressTimeout = 10 * time.Second

// minSilence is the least time a reader waits for the server to say
// anything before it replaces the connection; it waits ten status
// intervals when that is longer. Every status update asks for a reply,
// so a live server speaks at least once an interval.
const minSilence = 30 * time.Second

// pastDeadline, set as a connection's read deadline, ends the read in
// progress at once.
var pastDeadline = time.Unix(1, 0)

// walMark is the server's WAL flush position and time, read together: a
// stream that reaches the position has every transaction committed
// before the time.
type walMark struct {
	lsn pglogrepl.LSN
	at  time.Time
}

// stream reads the slot after START_REPLICATION: it hands the
// transactions over, tells the server the confirmed position every
// status interval, and returns nil when ctx ends, after a last status
// update, or the error that ended the stream.
//
// Only this goroutine uses conn. The progress goroutine, and ctx's end,
// interrupt its reads by moving the read deadline of the network
// connection into the past, as pgconn itself does when a context ends;
// a read that times out leaves the connection usable.
func (r *logReader) stream(ctx context.Context, conn *pgconn.PgConn) error {
	netConn := conn.Conn()
	interrupt := func() { _ = netConn.SetReadDeadline(pastDeadline) }
	due := make(chan struct{}, 1)
	r.conn, r.due, r.lastHeard, r.pings = conn, due, r.f.clock.Now(), 0
	r.mark.Store(nil)
	defer func() { r.conn, r.due = nil, nil }()

	progressCtx, stopProgress := context.WithCancel(ctx)
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		r.progress(progressCtx, r.position, due, interrupt)
	}()
	defer func() {
		stopProgress()
		<-progressDone
	}()
	defer context.AfterFunc(ctx, interrupt)()

	if r.reading(ctx, true) != nil {
		return r.finish()
	}
	dec := newLogDecoder(r.schema, r.table)
	interrupted := false
	for {
		if interrupted {
			// Cleared before looking at why, so that an interruption
			// after the look ends the next read.
			if err := netConn.SetReadDeadline(time.Time{}); err != nil {
				return fmt.Errorf("clear the read deadline: %w", err)
			}
			interrupted = false
		}
		if ctx.Err() != nil {
			return r.finish()
		}
		select {
		case <-due:
			if err := r.statusDue(); err != nil {
				return err
			}
			continue
		default:
		}
		msg, err := conn.ReceiveMessage(context.Background())
		if err != nil {
			if pgconn.Timeout(err) {
				interrupted = true
				continue
			}
			return fmt.Errorf("receive: %w", err)
		}
		r.lastHeard = r.f.clock.Now()
		if err := r.handle(ctx, dec, msg); err != nil {
			if ctx.Err() != nil {
				return r.finish()
			}
			return err
		}
	}
}

// handle acts on one message of the stream.
func (r *logReader) handle(ctx context.Context, dec *logDecoder, msg pgproto3.BackendMessage) error {
	switch m := msg.(type) {
	case *pgproto3.CopyData:
		if len(m.Data) == 0 {
			return errors.New("empty message in the stream")
		}
		switch m.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
			if err != nil {
				return err
			}
			if err := r.keepalive(ctx, dec, ka); err != nil {
				return err
			}
			if !ka.ReplyRequested {
				return nil
			}
			if err := r.sendStatus(); err != nil {
				return err
			}
			return r.stopping(ka)
		case pglogrepl.XLogDataByteID:
			r.pings = 0
			xld, err := pglogrepl.ParseXLogData(m.Data[1:])
			if err != nil {
				return err
			}
			tx, err := dec.decode(xld.WALData)
			if err != nil || tx == nil {
				return err
			}
			return r.commit(ctx, tx)
		}
	case *pgproto3.ErrorResponse:
		return pgconn.ErrorResponseToPgError(m)
	case *pgproto3.CopyDone:
		return errors.New("the server ended the stream")
	}
	return nil
}

// keepalive follows the server's position: everything before it was
// streamed, so the position may pass it (outside a transaction), and once
// it reaches the last WAL mark the stream has every transaction
// committed before the mark's time.
func (r *logReader) keepalive(ctx context.Context, dec *logDecoder, ka pglogrepl.PrimaryKeepaliveMessage) error {
	if dec.open {
		return nil
	}
	r.position.pass(ka.ServerWALEnd)
	mark := r.mark.Load()
	if mark == nil || ka.ServerWALEnd < mark.lsn {
		return nil
	}
	r.mark.CompareAndSwap(mark, nil)
	return r.cover(ctx, mark.at.Add(-r.f.coveredDelay))
}

// errServerStopping ends a stream that holds up the server's shutdown.
var errServerStopping = errors.New("the server is stopping, and waits for the stream to confirm transactions not settled yet; " +
	"ending the stream, which resumes from the last confirmed position")

// stopping returns errServerStopping when the server asked for a reply
// again, with no data in between and before the next status update was
// due, past the confirmed position: a server that shuts down asks so
// until the stream confirms everything it sent, and it waits for that,
// while the relay cannot settle anything on a database that is going
// away. Otherwise the server asks only when it has heard nothing for
// half its wal_sender_timeout, which a status update every interval
// prevents.
func (r *logReader) stopping(ka pglogrepl.PrimaryKeepaliveMessage) error {
	if confirmed, _ := r.position.current(); ka.ServerWALEnd <= confirmed {
		return nil
	}
	r.pings++
	if r.pings < 2 {
		return nil
	}
	return errServerStopping
}

// commit hands a transaction's events over, and tells Covered its commit
// time less the margin: every transaction committed before it was
// streamed before it.
func (r *logReader) commit(ctx context.Context, tx *logTx) error {
	r.received = tx.end
	if len(tx.rows) == 0 {
		r.position.pass(tx.end)
	} else {
		err := r.tell(ctx, logNote{kind: noteTransaction, tx: outboxdriver.FeedTransaction{
			Events: tx.rows, CommitTime: tx.commitTime, Settled: r.position.hand(tx.end),
		}})
		if err != nil {
			return err
		}
	}
	return r.cover(ctx, tx.commitTime.Add(-r.f.coveredDelay))
}

// statusDue sends the status update of the interval, unless the server
// fell silent.
func (r *logReader) statusDue() error {
	r.pings = 0
	silence := max(10*r.f.statusInterval, minSilence)
	if quiet := r.f.clock.Now().Sub(r.lastHeard); quiet > silence {
		return fmt.Errorf("the server sent nothing for %s", quiet)
	}
	return r.sendStatus()
}

// sendStatus tells the server the confirmed position, which frees the WAL
// before it, and asks for a keepalive in reply, which brings the server's
// position.
func (r *logReader) sendStatus() error {
	lsn, _ := r.position.current()
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), r.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: lsn, WALFlushPosition: lsn, WALApplyPosition: lsn,
		ClientTime: r.f.clock.Now(), ReplyRequested: true,
	})
	if err != nil {
		return fmt.Errorf("send status update: %w", err)
	}
	return nil
}

// finish ends a stream whose context ended: the server learns the last
// confirmed position.
func (r *logReader) finish() error {
	if err := r.sendStatus(); err != nil {
		r.f.logger.Warn("outbox: log feed could not send its last position; the slot stands where the previous update left it",
			"slot", r.f.slot, "error", err)
	}
	return nil
}

// confirmInterval is how soon a position that moved is confirmed to the
// server, when that is sooner than the status interval: a reader that dies
// has the transactions it settled since its last update streamed again to
// the next one, and delivered twice.
const confirmInterval = 100 * time.Millisecond

// progress runs while the reader streams: every status interval, and
// within confirmInterval of the position moving, it marks a status update
// due (interrupting the reader's read); every status interval it also
// records the slot's progress row and reads the server's WAL mark for the
// next caught-up check.
func (r *logReader) progress(ctx context.Context, position *logPosition, due chan<- struct{}, interrupt func()) {
	tick := min(r.f.statusInterval, confirmInterval)
	timer := r.f.clock.NewTimer(tick)
	defer timer.Stop()
	failing := false
	sent, _ := position.current()
	nextProgress := r.f.clock.Now().Add(r.f.statusInterval)
	for {
		select {
		case <-timer.C():
		case <-ctx.Done():
			return
		}
		now := r.f.clock.Now()
		lsn, _ := position.current()
		progressDue := !now.Before(nextProgress)
		if lsn != sent || progressDue {
			sent = lsn
			select {
			case due <- struct{}{}:
			default:
			}
			interrupt()
		}
		if !progressDue {
			timer.Reset(tick)
			continue
		}
		nextProgress = now.Add(r.f.statusInterval)
		mark, err := r.recordProgress(ctx, position)
		switch {
		case err == nil:
			r.mark.Store(&mark)
			failing = false
		case ctx.Err() == nil && !failing:
			failing = true
			r.f.logger.Warn("outbox: log feed could not record its progress row", "slot", r.f.slot, "error", err)
		}
		timer.Reset(tick)
	}
}

// recordProgress writes the slot's progress row (owner the reader, until
// when the confirmed position last moved) and returns the server's WAL
// mark.
func (r *logReader) recordProgress(ctx context.Context, position *logPosition) (walMark, error) {
	ctx, cancel := context.WithTimeout(ctx, progressTimeout)
	defer cancel()
	_, advanced := position.current()
	var (
		lsn  string
		mark walMark
	)
	err := r.f.d.db.QueryRow(ctx, r.f.d.t.sql.slotProgress, r.f.progressRow, r.f.reader, advanced).Scan(&lsn, &mark.at)
	if err != nil {
		return mark, err
	}
	mark.lsn, err = pglogrepl.ParseLSN(lsn)
	return mark, err
}
