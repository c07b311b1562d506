package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// A reader that lost its connection reconnects after firstReconnectPause,
// doubling up to maxReconnectPause, until a session streams again.
const (
	firstReconnectPause = 100 * time.Millisecond
	maxReconnectPause   = 5 * time.Second
)

// closeTimeout bounds the goodbye of a replication connection.
const closeTimeout = time.Second

// logReader is the goroutine of one Stream call that owns the replication
// connection: it connects, makes the slot ready, reads it, and passes the
// handler's calls to Stream's goroutine as notes.
type logReader struct {
	f     *LogFeed
	notes chan<- logNote

	told    *bool     // the last Reading told, nil before the first
	covered time.Time // the last Covered told

	// position is the slot's confirmed position, nil until the slot is
	// known; a slot created anew gets a new one. received is the end of
	// the last transaction the current slot streamed: a reconnection
	// starts past it, since what came before is handed over already.
	position *logPosition
	received pglogrepl.LSN
	sawSlot  bool // the slot existed during this Stream call

	// schema and table name the outbox table as the server does.
	schema, table string

	// While streaming: the connection, the progress goroutine's signal
	// that a status update is due (nil otherwise), the server's WAL
	// position and time it last read, when the server last spoke, and
	// how often it asked for a reply since the last data or status update.
	conn      *pgconn.PgConn
	due       chan struct{}
	mark      atomic.Pointer[walMark]
	lastHeard time.Time
	pings     int
}

func newLogReader(f *LogFeed, notes chan<- logNote) *logReader {
	return &logReader{f: f, notes: notes}
}

// run reads the slot until ctx ends (nil) or an error retrying cannot
// mend.
func (r *logReader) run(ctx context.Context) error {
	pause := firstReconnectPause
	for {
		streamed, err := r.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if stop := (*stopError)(nil); errors.As(err, &stop) {
			return stop.err
		}
		if r.reading(ctx, false) != nil {
			return nil
		}
		if streamed {
			pause = firstReconnectPause
		}
		r.f.logger.Warn("outbox: log feed lost its connection; reconnecting", "slot", r.f.slot, "pause", pause, "error", err)
		if !r.sleep(ctx, pause) {
			return nil
		}
		pause = min(2*pause, maxReconnectPause)
	}
}

// session connects, makes the slot ready and reads it, standing by while
// another reader holds it; it reports whether it streamed.
func (r *logReader) session(ctx context.Context) (bool, error) {
	conn, err := r.f.connect(ctx)
	if err != nil {
		return false, r.refusal(fmt.Errorf("connect: %w", err))
	}
	defer closeReplication(conn)
	for {
		start, err := r.prepare(ctx, conn)
		if err == nil {
			err = r.start(ctx, conn, start)
		}
		switch {
		case err == nil:
			return true, r.stream(ctx, conn)
		case !hasCode(err, codeObjectInUse):
			return false, err
		}
		if r.reading(ctx, false) != nil || !r.sleep(ctx, r.f.standbyRetry) {
			return false, nil
		}
	}
}

// start sends START_REPLICATION from lsn (0: where the slot stands).
func (r *logReader) start(ctx context.Context, conn *pgconn.PgConn, lsn pglogrepl.LSN) error {
	err := pglogrepl.StartReplication(ctx, conn, r.f.slot, lsn, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'", "publication_names " + literal(r.f.publication)},
	})
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// The server refused; the connection takes commands again once
		// its ReadyForQuery is read.
		if err := readyForQuery(ctx, conn); err != nil {
			return fmt.Errorf("start replication: %w", err)
		}
	}
	return r.refusal(fmt.Errorf("start replication: %w", err))
}

// readyForQuery reads what the server sends until it is ready for the
// next command.
func readyForQuery(ctx context.Context, conn *pgconn.PgConn) error {
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return err
		}
		if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
			return nil
		}
	}
}

func closeReplication(conn *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = conn.Close(ctx)
}

// tell passes n to Stream's goroutine, which may be busy with the
// handler's previous call for a long time: meanwhile a streaming reader
// keeps sending its status updates, without reading, so that the server
// neither times it out nor sends more than the socket holds.
func (r *logReader) tell(ctx context.Context, n logNote) error {
	for {
		select {
		case r.notes <- n:
			if r.conn != nil {
				r.lastHeard = r.f.clock.Now() // the server was not read meanwhile
			}
			return nil
		case <-r.due: // nil unless streaming
			if err := r.sendStatus(); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// reading tells Reading(reading) when it changes.
func (r *logReader) reading(ctx context.Context, reading bool) error {
	if r.told != nil && *r.told == reading {
		return nil
	}
	if err := r.tell(ctx, logNote{kind: noteReading, reading: reading}); err != nil {
		return err
	}
	r.told = &reading
	if reading {
		r.f.logger.Info("outbox: log feed reads its slot", "slot", r.f.slot, "reader", r.f.reader)
	} else {
		r.f.logger.Info("outbox: log feed does not read its slot: another reader holds it, or the database is away", "slot", r.f.slot)
	}
	return nil
}

// cover tells Covered(t) when t is later than the last.
func (r *logReader) cover(ctx context.Context, t time.Time) error {
	if !t.After(r.covered) {
		return nil
	}
	if err := r.tell(ctx, logNote{kind: noteCovered, covered: t}); err != nil {
		return err
	}
	r.covered = t
	return nil
}

// sleep waits d on the feed's clock, and reports false when ctx ended
// first.
func (r *logReader) sleep(ctx context.Context, d time.Duration) bool {
	t := r.f.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}
