package postgres

import (
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// collectEvents scans rows of eventColumns. A row whose headers cannot be
// decoded, or whose times are not times, comes back with Malformed set
// instead of failing the batch.
func collectEvents(rows pgx.Rows) ([]outbox.Event, error) {
	defer rows.Close()
	s := newEventScanner()
	var events []outbox.Event
	for rows.Next() {
		e, err := s.scan(rows)
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	return events, rows.Err()
}

// collectClaimed scans the rows of a claim of up to limit events, puts
// them in due order and returns the position of the last.
func collectClaimed(rows pgx.Rows, limit int, ordered bool) ([]outbox.Event, outbox.ClaimCursor, error) {
	defer rows.Close()
	s := newEventScanner()
	claimed := make([]outbox.Event, 0, limit)
	for rows.Next() {
		e, err := s.scan(rows)
		if err != nil {
			return nil, outbox.ClaimCursor{}, err
		}
		claimed = append(claimed, e)
	}
	if err := rows.Err(); err != nil || len(claimed) == 0 {
		return nil, outbox.ClaimCursor{}, err
	}
	// The order of the due index. A claim's rows usually come back in it
	// already, which costs the sort little.
	slices.SortFunc(claimed, outbox.CompareDue)
	last := claimed[len(claimed)-1]
	if ordered {
		last = slices.MaxFunc(claimed, outbox.CompareAggregates)
	}
	return claimed, outbox.CursorAt(last), nil
}

// eventScanner scans rows of eventColumns. One scanner serves every row of
// a result, which keeps a batch's decoding to a few allocations per event
// (a claim decodes thousands a second): the destinations are allocated
// once, a string equal to the previous row's keeps it, and headers are
// decoded from the driver's buffer, uncopied.
type eventScanner struct {
	id, eventType, topic, aggregateType, aggregateID,
	tenantID, lastError, lockedBy repeated
	payload  []byte
	headers  pgtype.DriverBytes
	isJSON   bool
	status   int16
	attempts int
	occurredAt, availableAt, createdAt, updatedAt,
	doneAt, lockedAt, lockedUntil pgtype.Timestamptz
	dest []any
}

func newEventScanner() *eventScanner {
	s := &eventScanner{}
	s.dest = []any{&s.id, &s.eventType, &s.topic, &s.aggregateType, &s.aggregateID, &s.tenantID,
		&s.payload, &s.isJSON, &s.headers, &s.status, &s.attempts, &s.occurredAt, &s.availableAt,
		&s.createdAt, &s.updatedAt, &s.doneAt, &s.lastError, &s.lockedBy, &s.lockedAt, &s.lockedUntil}
	return s
}

// scan reads the current row. The payload is the row's own copy.
func (s *eventScanner) scan(rows pgx.Rows) (outbox.Event, error) {
	if err := rows.Scan(s.dest...); err != nil {
		return outbox.Event{}, err
	}
	var notTime error
	e := outbox.Event{
		Envelope: outbox.Envelope{
			ID:            string(s.id),
			Type:          outbox.EventType(s.eventType),
			Topic:         string(s.topic),
			OccurredAt:    finite("occurred_at", s.occurredAt, &notTime),
			AggregateType: outbox.AggregateType(s.aggregateType),
			AggregateID:   string(s.aggregateID),
			TenantID:      string(s.tenantID),
		},
		Status:      outbox.Status(s.status),
		Attempts:    s.attempts,
		AvailableAt: finite("available_at", s.availableAt, &notTime),
		CreatedAt:   finite("created_at", s.createdAt, &notTime),
		UpdatedAt:   finite("updated_at", s.updatedAt, &notTime),
		DoneAt:      finite("done_at", s.doneAt, &notTime),
		LastError:   string(s.lastError),
		LockedBy:    string(s.lockedBy),
		LockedAt:    finite("locked_at", s.lockedAt, &notTime),
		LockedUntil: finite("locked_until", s.lockedUntil, &notTime),
	}
	payload := s.payload
	if payload == nil {
		payload = []byte{}
	}
	if s.isJSON {
		e.PayloadJSON = payload
	} else {
		e.PayloadBytes = payload
	}
	e.Headers, e.Malformed = outbox.DecodeHeaders(s.headers)
	if e.Malformed == nil {
		e.Malformed = notTime
	}
	return e, nil
}

// finite returns the time of ts, the zero time for NULL. PostgreSQL also
// stores ±infinity, which no writer of this package writes but a hand or
// another program may: such a row is malformed (the relay marks it DEAD),
// and *notTime says why, rather than a scan error that would fail every
// row of a claim, leaving them all claimed and undelivered.
func finite(column string, ts pgtype.Timestamptz, notTime *error) time.Time {
	if ts.Valid && ts.InfinityModifier != pgtype.Finite && *notTime == nil {
		*notTime = fmt.Errorf("%s is %s, not a time", column, ts.InfinityModifier)
	}
	return ts.Time
}

// repeated is a text column whose value is often the same as in the row
// before (event type, topic, owner, an empty optional column): an equal
// value keeps the string already there instead of allocating another.
// NULL scans as "".
type repeated string

// ScanBytes implements [pgtype.BytesScanner].
func (r *repeated) ScanBytes(b []byte) error {
	if string(*r) != string(b) {
		*r = repeated(b)
	}
	return nil
}
