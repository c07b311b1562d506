// Package sqlcodec is what the database/sql stores (SQLite, MySQL) share:
// how they store what the database cannot take as it is (times as unix
// microseconds, lists as one JSON array), the values of an event's row
// in the order both insert them, the scan of the event columns in the
// order both select them, and the reads and writes that differ between
// them in their SQL alone.
package sqlcodec

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/ident"
	"github.com/wmoutbox/wmoutbox/internal/migrationfiles"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// Micros is the stored form of a time: unix microseconds, the resolution of
// PostgreSQL's timestamptz, so that comparisons and ordering are exact.
func Micros(t time.Time) int64 { return t.UnixMicro() }

// Stored is t as it reads back once stored: to the microsecond, in UTC.
func Stored(t time.Time) time.Time { return time.UnixMicro(Micros(t)).UTC() }

// fromMicros reads a nullable stored time; NULL is the zero time.
func fromMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMicro(v.Int64).UTC()
}

// HexIDs encodes event ids as a JSON array of their bytes in hex. Hex,
// because JSON would replace the bytes of an id that is not valid UTF-8,
// which another writer may have stored, and the statement would then miss
// its row.
func HexIDs(ids []string) string {
	b := make([]byte, 0, 2+len(ids)*(2*26+3)) // room for ULIDs
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = hex.AppendEncode(b, []byte(id))
		b = append(b, '"')
	}
	return string(append(b, ']'))
}

// Strings encodes values as a JSON array.
func Strings(values []string) string {
	b, err := json.Marshal(values)
	if err != nil {
		panic(err) // a []string always encodes
	}
	return string(b)
}

// statusRow is one outcome as the stores' status statements read it from
// JSON. Absent fields read as NULL.
type statusRow struct {
	ID     string `json:"id"` // hex, as in HexIDs
	Status int    `json:"status"`
	Spent  int    `json:"spent"`
	NextAt *int64 `json:"next_at,omitempty"`
	Error  string `json:"error,omitempty"`
	Before *int   `json:"before,omitempty"` // failed attempts the row must have; nil: unchecked
}

// StatusUpdates encodes outcomes other than DONE as the JSON array of
// {"id" (hex), "status", "spent", "next_at", "error", "before"} objects
// that the stores' status statements apply: status 0 is a deferral, spent
// 1 a failed attempt, before the failed attempts the row must have. An
// outcome without an error, next time or attempt count leaves the field
// out, which the statements read as NULL.
func StatusUpdates(updates []outbox.StatusUpdate) (string, error) {
	rows := make([]statusRow, len(updates))
	for i, u := range updates {
		rows[i] = statusRow{ID: hex.EncodeToString([]byte(u.ID)), Status: int(u.Status), Error: outbox.CutError(u.Error)}
		if u.AttemptSpent() {
			rows[i].Spent = 1
		}
		if !u.NextAt.IsZero() {
			next := Micros(u.NextAt)
			rows[i].NextAt = &next
		}
		if attempts, checked := u.AttemptsBefore(); checked {
			rows[i].Before = &attempts
		}
	}
	batch, err := json.Marshal(rows)
	if err != nil {
		return "", err
	}
	return string(batch), nil
}

// Querier is what QueryEvents runs on: *sql.DB, *sql.Conn or *sql.Tx.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// ScanEvents scans rows of the stores' event columns: event_id,
// event_type, topic, aggregate_type, aggregate_id, tenant_id, payload,
// payload_json, headers, status, attempts, occurred_at, available_at,
// created_at, updated_at, done_at, last_error, locked_by, locked_at,
// locked_until, the nullable text columns selected as empty for NULL. A row
// whose headers cannot be decoded comes back with Malformed set instead of
// failing the batch. It closes rows.
func ScanEvents(rows *sql.Rows) ([]outbox.Event, error) {
	events, _, err := scanEvents(rows, false)
	return events, err
}

// ScanEventsWithKeys is ScanEvents for rows that have one more column, an
// integer key of the row, and returns the keys too, in the rows' order.
func ScanEventsWithKeys(rows *sql.Rows) ([]outbox.Event, []int64, error) {
	return scanEvents(rows, true)
}

func scanEvents(rows *sql.Rows, withKey bool) ([]outbox.Event, []int64, error) {
	defer rows.Close()
	var (
		events []outbox.Event
		keys   []int64
	)
	for rows.Next() {
		var (
			e                                     outbox.Event
			payload, headers                      []byte
			isJSON                                bool
			status                                int16
			occurred, available, created, updated int64
			doneAt, lockedAt, lockedUntil         sql.NullInt64
			eventType, aggType                    string
			key                                   int64
		)
		dest := []any{&e.ID, &eventType, &e.Topic, &aggType, &e.AggregateID, &e.TenantID,
			&payload, &isJSON, &headers, &status, &e.Attempts, &occurred, &available,
			&created, &updated, &doneAt, &e.LastError, &e.LockedBy, &lockedAt, &lockedUntil}
		if withKey {
			dest = append(dest, &key)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, err
		}
		e.Type, e.AggregateType, e.Status = outbox.EventType(eventType), outbox.AggregateType(aggType), outbox.Status(status)
		if payload == nil {
			payload = []byte{}
		}
		if isJSON {
			e.PayloadJSON = payload
		} else {
			e.PayloadBytes = payload
		}
		e.OccurredAt, e.AvailableAt = time.UnixMicro(occurred).UTC(), time.UnixMicro(available).UTC()
		e.CreatedAt, e.UpdatedAt = time.UnixMicro(created).UTC(), time.UnixMicro(updated).UTC()
		e.DoneAt, e.LockedAt, e.LockedUntil = fromMicros(doneAt), fromMicros(lockedAt), fromMicros(lockedUntil)
		e.Headers, e.Malformed = outbox.DecodeHeaders(headers)
		events = append(events, e)
		if withKey {
			keys = append(keys, key)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return events, keys, nil
}

// InsertValues returns the values of e's row as both stores insert it,
// written at now, claimed by lease if claiming: event_id, event_type,
// topic, aggregate_type, aggregate_id, tenant_id (NULL for none),
// payload, payload_json, headers (NULL for none), occurred_at,
// available_at (DeliverAfter, or now), created_at, updated_at, locked_by,
// locked_at, locked_until (NULL unless claiming); and the size of its
// payload and headers.
func InsertValues(e *outbox.Envelope, claiming bool, lease outbox.Lease, now time.Time) (values []any, size int, err error) {
	headers, err := outbox.EncodeHeaders(e.Headers)
	if err != nil {
		return nil, 0, err
	}
	var headerText any // NULL
	if headers != nil {
		headerText = string(headers)
	}
	payload := e.Payload()
	if payload == nil {
		payload = []byte{}
	}
	available := now
	if e.DeliverAfter.After(now) {
		available = e.DeliverAfter
	}
	var claim [3]any // NULL
	if claiming {
		claim = [3]any{lease.Owner, Micros(now), Micros(now.Add(lease.Duration))}
	}
	return []any{
		e.ID, string(e.Type), e.Topic, string(e.AggregateType), NullIfEmpty(e.AggregateID), NullIfEmpty(e.TenantID),
		payload, e.IsJSON(), headerText, Micros(e.OccurredAt), Micros(available),
		Micros(now), Micros(now), claim[0], claim[1], claim[2],
	}, len(payload) + len(headers), nil
}

// NullIfEmpty is s as a parameter, NULL when s is empty: an absent value,
// which no statement compares with the empty string (MySQL's text
// comparisons pad with spaces, so that a space equals the empty string).
func NullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// ScanColumn scans rows of one column and returns its values. It closes
// rows.
func ScanColumn[T any](rows *sql.Rows) ([]T, error) {
	defer rows.Close()
	var values []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		values = append(values, v)
	}
	return values, rows.Err()
}

// QueryEvents runs query, which selects the event columns (see
// ScanEvents), on q.
func QueryEvents(ctx context.Context, q Querier, query string, args ...any) ([]outbox.Event, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return ScanEvents(rows)
}

// The reads and writes below are the same in every database/sql store but
// for their SQL; table names the store and its table in their errors
// ("mysql: table outbox_event").

// Get reads the event with the given id with query, which takes the id;
// [outbox.ErrNotFound] when there is none.
func Get(ctx context.Context, q Querier, table, query, id string) (outbox.Event, error) {
	events, err := QueryEvents(ctx, q, query, id)
	if err != nil {
		return outbox.Event{}, fmt.Errorf("%s: get %s: %w", table, id, err)
	}
	if len(events) == 0 {
		return outbox.Event{}, fmt.Errorf("%w: %s", outbox.ErrNotFound, id)
	}
	return events[0], nil
}

// Existing returns those of ids that have a row, read in tx with one, a
// query that takes one id, or many, which takes HexIDs(ids).
func Existing(ctx context.Context, tx *sql.Tx, table, one, many string, ids []string) ([]string, error) {
	if tx == nil {
		return nil, outbox.ErrNoTransaction
	}
	if len(ids) == 0 {
		return nil, nil
	}
	query, arg := one, any(ids[0])
	if len(ids) > 1 {
		query, arg = many, HexIDs(ids)
	}
	rows, err := tx.QueryContext(ctx, query, arg)
	var existing []string
	if err == nil {
		existing, err = ScanColumn[string](rows)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: look up %d events: %w", table, len(ids), err)
	}
	return existing, nil
}

// Backlog reads a topic's pending events with query, which takes the topic
// and returns their count and the earliest due time.
func Backlog(ctx context.Context, db *sql.DB, table, query, topic string) (int64, time.Time, error) {
	var (
		n      int64
		oldest sql.NullInt64
	)
	if err := db.QueryRowContext(ctx, query, topic).Scan(&n, &oldest); err != nil {
		return 0, time.Time{}, fmt.Errorf("%s: backlog of %s: %w", table, topic, err)
	}
	return n, fromMicros(oldest), nil
}

// MarkProcessed records in tx that consumer processed event id at, with
// insert, which takes the three and writes no row for a record that
// exists, and reports whether it wrote one (see [outbox.Inbox]); inbox
// names the store and its inbox table in errors.
func MarkProcessed(ctx context.Context, tx *sql.Tx, inbox, insert, consumer, id string, at time.Time) (bool, error) {
	if tx == nil {
		return false, outbox.ErrNoTransaction
	}
	if err := outbox.ValidateProcessed(consumer, id); err != nil {
		return false, err
	}
	var n int64
	res, err := tx.ExecContext(ctx, insert, consumer, id, Micros(at))
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		return false, fmt.Errorf("%s: record event %s processed by %s: %w", inbox, id, consumer, err)
	}
	return n == 1, nil
}

// TopicVariant picks, of a statement's variants by topic filter (all
// topics, one, several), the one for topics, and its parameter: none, the
// topic, or the topics as a JSON array of strings.
func TopicVariant(variants [3]string, topics []string) (string, any) {
	switch len(topics) {
	case 0:
		return variants[0], nil
	case 1:
		return variants[1], topics[0]
	}
	return variants[2], Strings(topics)
}

// DeadFilter is f as the parameters of the stores' dead-event filters:
// ids (HexIDs), event type, topic, died before (unix microseconds), each
// NULL when f does not filter by it. The ids of a non-nil empty IDs are
// "[]", which matches no event.
func DeadFilter(f outbox.DeadFilter) []any {
	params := []any{nil, NullIfEmpty(string(f.EventType)), NullIfEmpty(f.Topic), nil}
	if f.IDs != nil {
		params[0] = HexIDs(f.IDs)
	}
	if !f.DiedBefore.IsZero() {
		params[3] = Micros(f.DiedBefore)
	}
	return params
}

// Table is a validated outbox table's names, as a database/sql store
// uses them in statements and errors.
type Table struct {
	Name       string
	Quoted     string
	Inbox      string // the inbox table, quoted
	Label      string // the store and table, for errors
	InboxLabel string // the store and inbox table, for errors
}

// NewTable validates name ([ident.ValidateTable], invalid the error it
// wraps) and returns its names for dialect, quoted by quote.
func NewTable(dialect, name string, quote func(string) string, invalid error) (Table, error) {
	if err := ident.ValidateTable(name, invalid); err != nil {
		return Table{}, fmt.Errorf("%s: table: %w", dialect, err)
	}
	inbox := name + migrationfiles.InboxSuffix
	return Table{Name: name, Quoted: quote(name), Inbox: quote(inbox),
		Label: dialect + ": table " + name, InboxLabel: dialect + ": table " + inbox}, nil
}
