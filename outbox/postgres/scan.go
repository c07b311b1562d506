package postgres

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// collectEvents scans rows of eventColumns. A row whose headers cannot be
// decoded comes back with Malformed set instead of failing the batch.
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

// collectClaimed scans the rows of a claim, puts them in due order and
// returns the position of the last.
func collectClaimed(rows pgx.Rows) ([]outbox.Event, outbox.ClaimCursor, error) {
	defer rows.Close()
	type claimed struct {
		event outbox.Event
		due   time.Time
	}
	var due time.Time
	s := newEventScanner(&due)
	var batch []claimed
	for rows.Next() {
		e, err := s.scan(rows)
		if err != nil {
			return nil, outbox.ClaimCursor{}, err
		}
		batch = append(batch, claimed{e, due})
	}
	if err := rows.Err(); err != nil || len(batch) == 0 {
		return nil, outbox.ClaimCursor{}, err
	}
	slices.SortFunc(batch, func(a, b claimed) int {
		return cmp.Or(a.due.Compare(b.due), strings.Compare(a.event.ID, b.event.ID))
	})
	events := make([]outbox.Event, len(batch))
	for i, c := range batch {
		events[i] = c.event
	}
	last := batch[len(batch)-1]
	return events, outbox.ClaimCursor{DueAt: last.due, ID: last.event.ID}, nil
}

// eventScanner scans rows of eventColumns, then extra columns. One scanner
// serves every row of a result, which keeps a batch's decoding to a few
// allocations per event (a claim decodes thousands a second): the
// destinations are allocated once, a string equal to the previous row's
// keeps it, and headers are decoded from the driver's buffer, uncopied.
type eventScanner struct {
	id, eventType, topic, aggregateType, aggregateID,
	tenantID, lastError, lockedBy repeated
	payload                                       []byte
	headers                                       pgtype.DriverBytes
	isJSON                                        bool
	status                                        int16
	attempts                                      int
	occurredAt, availableAt, createdAt, updatedAt time.Time
	doneAt, lockedAt                              pgtype.Timestamptz
	dest                                          []any
}

func newEventScanner(extra ...any) *eventScanner {
	s := &eventScanner{}
	s.dest = append([]any{&s.id, &s.eventType, &s.topic, &s.aggregateType, &s.aggregateID, &s.tenantID,
		&s.payload, &s.isJSON, &s.headers, &s.status, &s.attempts, &s.occurredAt, &s.availableAt,
		&s.createdAt, &s.updatedAt, &s.doneAt, &s.lastError, &s.lockedBy, &s.lockedAt}, extra...)
	return s
}

// scan reads the current row. The payload is the row's own copy.
func (s *eventScanner) scan(rows pgx.Rows) (outbox.Event, error) {
	if err := rows.Scan(s.dest...); err != nil {
		return outbox.Event{}, err
	}
	e := outbox.Event{
		Envelope: outbox.Envelope{
			ID:            string(s.id),
			Type:          outbox.EventType(s.eventType),
			Topic:         string(s.topic),
			OccurredAt:    s.occurredAt,
			AggregateType: outbox.AggregateType(s.aggregateType),
			AggregateID:   string(s.aggregateID),
			TenantID:      string(s.tenantID),
		},
		Status:      outbox.Status(s.status),
		Attempts:    s.attempts,
		AvailableAt: s.availableAt,
		CreatedAt:   s.createdAt,
		UpdatedAt:   s.updatedAt,
		DoneAt:      s.doneAt.Time,
		LastError:   string(s.lastError),
		LockedBy:    string(s.lockedBy),
		LockedAt:    s.lockedAt.Time,
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
	return e, nil
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
