package postgres

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// collectRows scans rows of eventColumns, with room for capacity of
// them. A row whose times are not times comes back with Malformed set
// instead of failing the batch.
func collectRows(rows pgx.Rows, capacity int) ([]outboxdriver.Row, error) {
	return collect(rows, capacity, false)
}

// collect is collectRows for rows of eventColumns followed, with runs, by
// the row's place in its run (sqlLeaseRuns).
func collect(rows pgx.Rows, capacity int, runs bool) ([]outboxdriver.Row, error) {
	defer rows.Close()
	s := newEventScanner()
	if runs {
		s.dest = append(s.dest, &s.runIndex)
	}
	result := make([]outboxdriver.Row, 0, capacity)
	for rows.Next() {
		r, err := s.scan(rows)
		if err != nil {
			return nil, err
		}
		result = append(result, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return result, nil
}

// eventScanner scans rows of eventColumns. One scanner serves every row of
// a result, which keeps a batch's decoding to a few allocations per event
// (a claim decodes thousands a second): the destinations are allocated
// once, and a string equal to the previous row's keeps it.
type eventScanner struct {
	id, eventType, topic, aggregateType, aggregateID,
	tenantID, lastError, lockedBy, errorGroup,
	idempotencyKey repeated
	payload  []byte
	doc      []byte // payload_doc; nil for NULL
	headers  pgtype.DriverBytes
	isJSON   bool
	status   int16
	attempts int
	seq      int64
	occurredAt, availableAt, createdAt, updatedAt,
	doneAt, lockedAt, lockedUntil pgtype.Timestamptz
	runIndex int
	dest     []any
}

func newEventScanner() *eventScanner {
	s := &eventScanner{}
	s.dest = []any{&s.id, &s.eventType, &s.topic, &s.aggregateType, &s.aggregateID, &s.tenantID,
		&s.payload, &s.doc, &s.isJSON, &s.headers, &s.status, &s.attempts, &s.occurredAt, &s.availableAt,
		&s.createdAt, &s.updatedAt, &s.doneAt, &s.lastError, &s.lockedBy, &s.lockedAt, &s.lockedUntil, &s.errorGroup,
		&s.idempotencyKey, &s.seq}
	return s
}

// scan reads the current row. The payload and headers are the row's own.
func (s *eventScanner) scan(rows pgx.Rows) (outboxdriver.Row, error) {
	s.payload, s.doc = nil, nil
	if err := rows.Scan(s.dest...); err != nil {
		return outboxdriver.Row{}, err
	}
	var notTime error
	r := outboxdriver.Row{
		ID:             string(s.id),
		Type:           string(s.eventType),
		Topic:          string(s.topic),
		AggregateType:  string(s.aggregateType),
		AggregateID:    string(s.aggregateID),
		TenantID:       string(s.tenantID),
		Payload:        storedPayload(s.payload, s.doc),
		PayloadJSON:    s.isJSON,
		Status:         s.status,
		Attempts:       s.attempts,
		OccurredAt:     finite("occurred_at", s.occurredAt, &notTime),
		AvailableAt:    finite("available_at", s.availableAt, &notTime),
		CreatedAt:      finite("created_at", s.createdAt, &notTime),
		UpdatedAt:      finite("updated_at", s.updatedAt, &notTime),
		DoneAt:         finite("done_at", s.doneAt, &notTime),
		LastError:      string(s.lastError),
		LockedBy:       string(s.lockedBy),
		LockedAt:       finite("locked_at", s.lockedAt, &notTime),
		LockedUntil:    finite("locked_until", s.lockedUntil, &notTime),
		ErrorGroup:     string(s.errorGroup),
		IdempotencyKey: string(s.idempotencyKey),
		Seq:            s.seq,
		RunIndex:       s.runIndex,
	}
	if r.Payload == nil {
		r.Payload = []byte{}
	}
	r.Headers = string(s.headers) // a copy: the driver's buffer is reused
	r.Malformed = notTime
	return r, nil
}

// storedPayload is the payload of a row whose payload column holds payload
// and payload_doc doc (nil for NULL): doc when there is one (migration 7,
// Config.JSONPayloadColumn), payload otherwise. The json column keeps the
// text as written, so doc is the bytes written.
func storedPayload(payload, doc []byte) []byte {
	if doc != nil {
		return doc
	}
	return payload
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
