// Package sqlcodec is what the database/sql drivers (SQLite, MySQL)
// share: how they store what the database cannot take as it is (times as
// unix microseconds, lists as one JSON array), the values of an event's
// row in the order both insert them, the scan of the event columns in the
// order both select them, and the reads and writes that differ between
// them in their SQL alone.
package sqlcodec

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/internal/ident"
	"github.com/wmoutbox/wmoutbox/internal/migrationfiles"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// Micros is the stored form of a time: unix microseconds, the resolution of
// PostgreSQL's timestamptz, so that comparisons and ordering are exact.
func Micros(t time.Time) int64 { return t.UnixMicro() }

// Stored is t as it reads back once stored: to the microsecond, in UTC.
func Stored(t time.Time) time.Time { return time.UnixMicro(Micros(t)).UTC() }

// AppliedAt is the stored time at which a migration is recorded applied:
// clock's time, or the system's when clock is nil.
func AppliedAt(clock outbox.Clock) int64 {
	if clock == nil {
		return Micros(time.Now())
	}
	return Micros(clock.Now())
}

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

// outcomeRow is one outcome as the drivers' status statements read it
// from JSON. Absent fields read as NULL.
type outcomeRow struct {
	ID     string `json:"id"` // hex, as in HexIDs
	Status int    `json:"status"`
	Spent  int    `json:"spent"`
	NextAt *int64 `json:"next_at,omitempty"`
	Error  string `json:"error,omitempty"`
	Group  string `json:"group,omitempty"`  // error_group, with an error
	Before *int   `json:"before,omitempty"` // failed attempts the row must have; nil: unchecked
}

// Outcomes encodes outcomes as the JSON array of {"id" (hex), "status",
// "spent", "next_at", "error", "group", "before"} objects that the
// drivers' status statements apply (group, the error's error_group, only
// with an error): status 0 is a deferral, spent 1 a failed attempt,
// before the failed attempts the row must have. An outcome without an
// error, next time or attempt check leaves the field out, which the
// statements read as NULL.
func Outcomes(outcomes []outboxdriver.Outcome) string {
	rows := make([]outcomeRow, len(outcomes))
	for i := range outcomes {
		o := &outcomes[i]
		rows[i] = outcomeRow{ID: hex.EncodeToString([]byte(o.ID)), Status: int(o.Status), Error: o.Error}
		if o.Error != "" {
			rows[i].Group = o.ErrorGroup
		}
		if o.AttemptSpent {
			rows[i].Spent = 1
		}
		if !o.NextAt.IsZero() {
			rows[i].NextAt = new(Micros(o.NextAt))
		}
		if o.AttemptsChecked {
			rows[i].Before = new(o.AttemptsBefore)
		}
	}
	batch, err := json.Marshal(rows)
	if err != nil {
		panic(err) // strings and numbers always encode
	}
	return string(batch)
}

// Querier is what QueryRows runs on: *sql.DB, *sql.Conn or *sql.Tx.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// ScanRowsWithKeys scans rows of the drivers' event columns and one more,
// an integer key of the row, and returns the rows and the keys, in the
// rows' order (see QueryRows for the event columns). It closes rows.
func ScanRowsWithKeys(rows *sql.Rows) ([]outboxdriver.Row, []int64, error) {
	return scanRows(rows, true)
}

func scanRows(rows *sql.Rows, withKey bool) ([]outboxdriver.Row, []int64, error) {
	defer rows.Close()
	var (
		result []outboxdriver.Row
		keys   []int64
	)
	for rows.Next() {
		var (
			r                                     outboxdriver.Row
			headers                               []byte
			occurred, available, created, updated int64
			doneAt, lockedAt, lockedUntil         sql.NullInt64
			key                                   int64
		)
		dest := []any{&r.ID, &r.Type, &r.Topic, &r.AggregateType, &r.AggregateID, &r.TenantID,
			&r.Payload, &r.PayloadJSON, &headers, &r.Status, &r.Attempts, &occurred, &available,
			&created, &updated, &doneAt, &r.LastError, &r.LockedBy, &lockedAt, &lockedUntil, &r.ErrorGroup, &r.IdempotencyKey}
		if withKey {
			dest = append(dest, &key)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, err
		}
		if r.Payload == nil {
			r.Payload = []byte{}
		}
		r.Headers = string(headers)
		r.OccurredAt, r.AvailableAt = time.UnixMicro(occurred).UTC(), time.UnixMicro(available).UTC()
		r.CreatedAt, r.UpdatedAt = time.UnixMicro(created).UTC(), time.UnixMicro(updated).UTC()
		r.DoneAt, r.LockedAt, r.LockedUntil = fromMicros(doneAt), fromMicros(lockedAt), fromMicros(lockedUntil)
		result = append(result, r)
		if withKey {
			keys = append(keys, key)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return result, keys, nil
}

// InsertValues returns the values of r's row as both drivers insert it,
// written by p: event_id, event_type, topic, aggregate_type,
// aggregate_id, tenant_id (NULL for none), payload, payload_json, headers
// (NULL for none), occurred_at, available_at, created_at, updated_at
// (p.Now), locked_by, locked_at, locked_until (p's lease for a claimed
// row, NULL otherwise), idempotency_key (NULL for none); and the size of
// its payload and headers.
func InsertValues(r *outboxdriver.InsertRow, p *outboxdriver.InsertParams) (values []any, size int) {
	var claim [3]any // NULL
	if r.Claimed {
		claim = [3]any{p.Owner, Micros(p.Now), Micros(p.LockedUntil)}
	}
	now := Micros(p.Now)
	return []any{
		r.ID, r.Type, r.Topic, r.AggregateType, NullIfEmpty(r.AggregateID), NullIfEmpty(r.TenantID),
		r.Payload, r.PayloadJSON, NullIfEmpty(r.Headers), Micros(r.OccurredAt), Micros(r.AvailableAt),
		now, now, claim[0], claim[1], claim[2], NullIfEmpty(r.IdempotencyKey),
	}, len(r.Payload) + len(r.Headers)
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

// QueryPairs runs query on q and returns the values of its two text
// columns.
func QueryPairs(ctx context.Context, q Querier, query string, args ...any) ([][2]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return ScanPairs(rows)
}

// ScanPairs scans rows of two text columns and returns their values. It
// closes rows.
func ScanPairs(rows *sql.Rows) ([][2]string, error) {
	defer rows.Close()
	var pairs [][2]string
	for rows.Next() {
		var p [2]string
		if err := rows.Scan(&p[0], &p[1]); err != nil {
			return nil, err
		}
		pairs = append(pairs, p)
	}
	return pairs, rows.Err()
}

// QueryRows runs query on q and returns the rows it selects: the drivers'
// event columns, event_id, event_type, topic, aggregate_type,
// aggregate_id, tenant_id, payload, payload_json, headers, status,
// attempts, occurred_at, available_at, created_at, updated_at, done_at,
// last_error, locked_by, locked_at, locked_until, error_group,
// idempotency_key, the nullable text columns selected as empty for NULL. The headers come back as stored, ""
// for NULL: the engine decodes them.
func QueryRows(ctx context.Context, q Querier, query string, args ...any) ([]outboxdriver.Row, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	result, _, err := scanRows(rows, false)
	return result, err
}

// The reads and writes below are the same in every database/sql driver
// but for their SQL; table names the driver and its table in their errors
// ("mysql: table outbox_event").

// Get reads the row of event id with query, which takes the id, and
// reports false when there is none.
func Get(ctx context.Context, q Querier, table, query, id string) (outboxdriver.Row, bool, error) {
	rows, err := QueryRows(ctx, q, query, id)
	if err != nil {
		return outboxdriver.Row{}, false, fmt.Errorf("%s: get %s: %w", table, id, err)
	}
	if len(rows) == 0 {
		return outboxdriver.Row{}, false, nil
	}
	return rows[0], true, nil
}

// Existing returns those of ids that have a row, read in tx with one, a
// query that takes one id, or many, which takes HexIDs(ids).
func Existing(ctx context.Context, tx *sql.Tx, table, one, many string, ids []string) ([]string, error) {
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
// exists, and reports whether it wrote one (see
// [outboxdriver.Driver.MarkProcessed]); inbox names the driver and its
// inbox table in errors.
func MarkProcessed(ctx context.Context, tx *sql.Tx, inbox, insert, consumer, id string, at time.Time) (bool, error) {
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

// DeadFilter is f as the parameters of the drivers' dead-event filters,
// each NULL when f does not filter by it: ids (HexIDs), event type, topic,
// died before (unix microseconds), aggregate type, aggregate id, a LIKE
// pattern of the error in lower case (codec.Contains, with escape
// character codec.LikeEscape), error group, 1 for ungrouped, died after.
// The ids of a non-nil empty IDs are "[]", which matches no event.
func DeadFilter(f outboxdriver.DeadFilter) []any {
	params := []any{nil, NullIfEmpty(f.EventType), NullIfEmpty(f.Topic), nil,
		NullIfEmpty(f.AggregateType), NullIfEmpty(f.AggregateID), nil, NullIfEmpty(f.Group), nil, nil}
	if f.IDs != nil {
		params[0] = HexIDs(f.IDs)
	}
	if !f.DiedBefore.IsZero() {
		params[3] = Micros(f.DiedBefore)
	}
	if f.ErrorContains != "" {
		params[6] = codec.Contains(strings.ToLower(f.ErrorContains))
	}
	if f.Ungrouped {
		params[8] = 1
	}
	if !f.DiedAfter.IsZero() {
		params[9] = Micros(f.DiedAfter)
	}
	return params
}

// Stats reads a table's counts with topics, which returns topic, status,
// count and earliest due time (NULL for none) rows, and claims, which
// returns owner, topic, count, earliest locked_at and latest locked_until
// rows, each run with its arguments; claims "" reads no claims.
func Stats(ctx context.Context, q Querier, table, topics string, topicsArgs []any, claims string, claimsArgs []any) (outboxdriver.StatsResult, error) {
	var res outboxdriver.StatsResult
	rows, err := q.QueryContext(ctx, topics, topicsArgs...)
	if err == nil {
		res.Topics, err = scanEach(rows, func(rows *sql.Rows) (outboxdriver.TopicStatus, error) {
			var (
				ts     outboxdriver.TopicStatus
				oldest sql.NullInt64
			)
			err := rows.Scan(&ts.Topic, &ts.Status, &ts.Count, &oldest)
			ts.OldestDue = fromMicros(oldest)
			return ts, err
		})
	}
	if err != nil {
		return res, fmt.Errorf("%s: stats: %w", table, err)
	}
	if claims == "" {
		return res, nil
	}
	rows, err = q.QueryContext(ctx, claims, claimsArgs...)
	if err == nil {
		res.Claims, err = scanEach(rows, func(rows *sql.Rows) (outboxdriver.OwnerClaims, error) {
			var (
				c                   outboxdriver.OwnerClaims
				lockedAt, leaseEnds sql.NullInt64
			)
			err := rows.Scan(&c.Owner, &c.Topic, &c.Events, &lockedAt, &leaseEnds)
			c.OldestClaim, c.LeaseEnds = fromMicros(lockedAt), fromMicros(leaseEnds)
			return c, err
		})
	}
	if err != nil {
		return res, fmt.Errorf("%s: claims: %w", table, err)
	}
	return res, nil
}

// Relays reads the relay heartbeats with query, which returns owner and
// until (unix microseconds) rows, run with the heartbeats' name pattern.
func Relays(ctx context.Context, q Querier, table, query string) ([]outboxdriver.RelayHeartbeat, error) {
	rows, err := q.QueryContext(ctx, query, outboxdriver.HeartbeatPattern)
	var relays []outboxdriver.RelayHeartbeat
	if err == nil {
		relays, err = scanEach(rows, func(rows *sql.Rows) (outboxdriver.RelayHeartbeat, error) {
			var (
				r     outboxdriver.RelayHeartbeat
				until int64
			)
			err := rows.Scan(&r.Owner, &until)
			r.Until = time.UnixMicro(until).UTC()
			return r, err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("%s: relay heartbeats: %w", table, err)
	}
	return relays, nil
}

// DeadGroups reads the groups of DEAD rows with groups, which returns
// group ("" for NULL), count, first and last died and a sample error
// rows, and their topics with topics, which returns the distinct group
// ("" for NULL) and topic pairs of the same rows, each run with its
// arguments. Each group's topics come sorted.
func DeadGroups(ctx context.Context, q Querier, table, groups string, groupsArgs []any, topics string, topicsArgs []any) ([]outboxdriver.DeadGroup, error) {
	rows, err := q.QueryContext(ctx, groups, groupsArgs...)
	var result []outboxdriver.DeadGroup
	if err == nil {
		result, err = scanEach(rows, func(rows *sql.Rows) (outboxdriver.DeadGroup, error) {
			var (
				g                   outboxdriver.DeadGroup
				firstDied, lastDied int64
			)
			err := rows.Scan(&g.Group, &g.Count, &firstDied, &lastDied, &g.SampleError)
			g.FirstDied, g.LastDied = time.UnixMicro(firstDied).UTC(), time.UnixMicro(lastDied).UTC()
			return g, err
		})
	}
	if err != nil || len(result) == 0 {
		return result, wrapErr(table, "dead event groups", err)
	}
	index := make(map[string]int, len(result))
	for i, g := range result {
		index[g.Group] = i
	}
	rows, err = q.QueryContext(ctx, topics, topicsArgs...)
	var pairs [][2]string
	if err == nil {
		pairs, err = scanEach(rows, func(rows *sql.Rows) ([2]string, error) {
			var pair [2]string
			return pair, rows.Scan(&pair[0], &pair[1])
		})
	}
	if err != nil {
		return nil, wrapErr(table, "topics of dead event groups", err)
	}
	for _, pair := range pairs {
		if i, ok := index[pair[0]]; ok {
			result[i].Topics = append(result[i].Topics, pair[1])
		}
	}
	for i := range result {
		slices.Sort(result[i].Topics)
		result[i].Topics = slices.Compact(result[i].Topics)
	}
	return result, nil
}

// wrapErr names the driver, table and operation in err; nil stays nil.
func wrapErr(table, op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %s: %w", table, op, err)
}

// scanEach scans every row of rows with scan, and closes rows.
func scanEach[T any](rows *sql.Rows, scan func(*sql.Rows) (T, error)) ([]T, error) {
	defer rows.Close()
	var values []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		values = append(values, v)
	}
	return values, rows.Err()
}

// Table is a validated outbox table's names, as a database/sql driver
// uses them in statements and errors.
type Table struct {
	Name       string
	Quoted     string
	Inbox      string // the inbox table, quoted
	Lease      string // the lease table, quoted
	Label      string // the driver and table, for errors
	InboxLabel string // the driver and inbox table, for errors
}

// NewTable validates name ([ident.ValidateTable], invalid the error it
// wraps) and returns its names for dialect, quoted by quote.
func NewTable(dialect, name string, quote func(string) string, invalid error) (Table, error) {
	if err := ident.ValidateTable(name, invalid); err != nil {
		return Table{}, err
	}
	inbox := name + migrationfiles.InboxSuffix
	return Table{Name: name, Quoted: quote(name), Inbox: quote(inbox), Lease: quote(name + migrationfiles.LeaseSuffix),
		Label: dialect + ": table " + name, InboxLabel: dialect + ": table " + inbox}, nil
}

// AppliedMigrations reads the migrations recorded for table: none, and no
// error, when exists (a count of the record tables, given their name)
// finds no record table; otherwise list (given table) returns version,
// name and applied_at in unix microseconds, in version order.
func AppliedMigrations(ctx context.Context, db *sql.DB, exists, list, table string) ([]migrationfiles.Applied, error) {
	var tables int
	if err := db.QueryRowContext(ctx, exists, ident.MigrationTable).Scan(&tables); err != nil {
		return nil, err
	}
	if tables == 0 {
		return nil, nil
	}
	rows, err := db.QueryContext(ctx, list, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var applied []migrationfiles.Applied
	for rows.Next() {
		var (
			m         migrationfiles.Applied
			appliedAt int64
		)
		if err := rows.Scan(&m.Version, &m.Name, &appliedAt); err != nil {
			return nil, err
		}
		m.AppliedAt = time.UnixMicro(appliedAt).UTC()
		applied = append(applied, m)
	}
	return applied, rows.Err()
}
