package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// SQLSTATEs a log feed tells apart.
const (
	codeObjectInUse       = "55006" // the slot is held by another reader
	codeUndefinedObject   = "42704" // the slot does not exist
	codeDuplicateObject   = "42710" // the slot or publication exists already
	codeUniqueViolation   = "23505" // so does a publication made concurrently
	codeInsufficientPriv  = "42501"
	logicalWALLevel       = "logical"
	pgoutputPlugin        = "pgoutput"
	slotInvalidatedStatus = "lost" // pg_replication_slots.wal_status
)

// stopError is an error that retrying cannot mend: Stream returns err.
type stopError struct{ err error }

func (e *stopError) Error() string { return e.err.Error() }
func (e *stopError) Unwrap() error { return e.err }

// refusal makes err a stopError when it is the server's refusal for a
// missing privilege, which no retry gets.
func (r *logReader) refusal(err error) error {
	if hasCode(err, codeInsufficientPriv) {
		return &stopError{fmt.Errorf("postgres: log feed of slot %s: %w", r.f.slot, err)}
	}
	return err
}

func hasCode(err error, codes ...string) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	for _, c := range codes {
		if pgErr.Code == c {
			return true
		}
	}
	return false
}

// checkWALLevel returns [ErrLogicalDecodingOff], saying what to do, unless
// the server's wal_level is logical.
func checkWALLevel(level string) error {
	if level == logicalWALLevel {
		return nil
	}
	return fmt.Errorf("%w: wal_level is %s, and a log feed needs logical: set wal_level = logical "+
		"in postgresql.conf (or ALTER SYSTEM SET wal_level = logical) and restart the server", ErrLogicalDecodingOff, level)
}

// logState is what sqlLogState reads.
type logState struct {
	walLevel string
	// schema and table name the outbox table as the server does; "" when
	// it does not exist.
	schema, table string
	publication   bool // it exists
	publishes     bool // it publishes the table's inserts
	slot          bool // it exists
	slotFits      bool // logical, pgoutput, of this database
	slotDesc      string
	slotLost      bool
	confirmed     pglogrepl.LSN
}

func (r *logReader) readState(ctx context.Context, conn *pgconn.PgConn) (logState, error) {
	var st logState
	results, err := conn.Exec(ctx, r.f.stateSQL).ReadAll()
	if err != nil {
		return st, fmt.Errorf("read the slot's state: %w", err)
	}
	if len(results) != 1 || len(results[0].Rows) != 1 || len(results[0].Rows[0]) != 10 {
		return st, errors.New("read the slot's state: not one row of 10 columns")
	}
	row := results[0].Rows[0]
	st.walLevel, st.schema, st.table = string(row[0]), string(row[1]), string(row[2])
	st.publication = row[3] != nil
	st.publishes = string(row[3]) == "t" && string(row[4]) == "t"
	st.slot = row[5] != nil || row[6] != nil
	plugin, kind := string(row[5]), string(row[6])
	st.slotFits = plugin == pgoutputPlugin && kind == "logical" && string(row[7]) == "t"
	st.slotDesc = fmt.Sprintf("a %s slot of plugin %q", kind, plugin)
	if string(row[7]) != "t" {
		st.slotDesc += " of another database"
	}
	st.slotLost = string(row[8]) == slotInvalidatedStatus
	if row[9] != nil {
		if st.confirmed, err = pglogrepl.ParseLSN(string(row[9])); err != nil {
			return st, fmt.Errorf("read the slot's state: %w", err)
		}
	}
	return st, nil
}

// prepare makes sure the publication and the slot exist and fit, and
// returns where to start reading. A slot it creates, because it was
// missing (never made, dropped) or invalidated, starts a new position and
// tells Covered the time its creation returned: events committed before
// it are not in its stream.
func (r *logReader) prepare(ctx context.Context, conn *pgconn.PgConn) (pglogrepl.LSN, error) {
	for {
		st, err := r.readState(ctx, conn)
		if err != nil {
			return 0, err
		}
		if err := checkWALLevel(st.walLevel); err != nil {
			return 0, &stopError{err}
		}
		if st.table == "" {
			return 0, &stopError{fmt.Errorf("postgres: log feed: %w", &outbox.NotMigratedError{Table: r.f.d.t.label(), Fix: migrateFix})}
		}
		r.schema, r.table = st.schema, st.table
		if err := r.ensurePublication(ctx, conn, st); err != nil {
			return 0, err
		}
		switch {
		case !st.slot:
			if r.sawSlot {
				r.f.logger.Warn("outbox: log feed finds its slot dropped; creating it again, and leaving the events committed meanwhile to claims",
					"slot", r.f.slot)
			}
		case !st.slotFits:
			return 0, &stopError{fmt.Errorf("%w: slot %s is %s, not a logical pgoutput slot of this database", ErrLogFeedConflict, r.f.slot, st.slotDesc)}
		case st.slotLost:
			r.f.logger.Warn("outbox: log feed finds its slot invalidated, the WAL it needed removed (max_slot_wal_keep_size); "+
				"dropping it and creating it again, and leaving the events it held to claims", "slot", r.f.slot)
			if _, err := conn.Exec(ctx, r.f.dropSlotSQL).ReadAll(); err != nil && !hasCode(err, codeUndefinedObject) {
				return 0, fmt.Errorf("drop invalidated slot %s: %w", r.f.slot, err)
			}
		default:
			r.sawSlot = true
			if r.position == nil {
				r.position = newLogPosition(r.f.clock, st.confirmed)
			}
			r.position.raise(st.confirmed)
			return max(r.received, st.confirmed), nil
		}
		start, created, err := r.createSlot(ctx, conn)
		if err != nil || created {
			return start, err
		}
		// Another feed created it first: read it again.
	}
}

func (r *logReader) ensurePublication(ctx context.Context, conn *pgconn.PgConn, st logState) error {
	if st.publication {
		if !st.publishes {
			return &stopError{fmt.Errorf("%w: publication %s does not publish the inserts of %s.%s",
				ErrLogFeedConflict, r.f.publication, st.schema, st.table)}
		}
		return nil
	}
	create := fmt.Sprintf(sqlCreatePublicationFormat, pgx.Identifier{r.f.publication}.Sanitize(),
		pgx.Identifier{st.schema, st.table}.Sanitize())
	if _, err := conn.Exec(ctx, create).ReadAll(); err != nil {
		if hasCode(err, codeDuplicateObject, codeUniqueViolation) {
			return nil // another feed made it at the same time
		}
		return r.refusal(fmt.Errorf("create publication %s: %w", r.f.publication, err))
	}
	r.f.logger.Info("outbox: log feed created its publication", "publication", r.f.publication, "table", st.schema+"."+st.table)
	return nil
}

// createSlot creates the slot and reports whether it did: not when
// another feed did first.
func (r *logReader) createSlot(ctx context.Context, conn *pgconn.PgConn) (pglogrepl.LSN, bool, error) {
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, r.f.slot, pgoutputPlugin,
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
	if hasCode(err, codeDuplicateObject) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, r.refusal(fmt.Errorf("create slot %s: %w", r.f.slot, err))
	}
	start, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return 0, false, fmt.Errorf("create slot %s: %w", r.f.slot, err)
	}
	// Every event committed before the slot's consistent point is left to
	// claims, and so, since the creation waits for the transactions open
	// at its start, is one written before the creation returned that
	// commits after that point: it is in the stream too, and may be
	// delivered twice, rather than wait for the claims' margin.
	created := r.f.clock.Now()
	r.f.logger.Info("outbox: log feed created its slot", "slot", r.f.slot, "position", start)
	// A new slot is a new stream: what the old one handed over is
	// settled (or claimed) apart from it.
	r.sawSlot, r.received = true, 0
	r.position = newLogPosition(r.f.clock, start)
	return start, true, r.cover(ctx, created)
}
