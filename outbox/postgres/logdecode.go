package postgres

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// The columns of the outbox table a decoded row reads, by name: pgoutput
// sends the table's columns in their order, which migrations (and users'
// own columns) change.
const (
	colEventID = iota
	colEventType
	colTopic
	colAggregateType
	colAggregateID
	colTenantID
	colPayload
	colPayloadJSON
	colPayloadDoc
	colHeaders
	colStatus
	colAttempts
	colOccurredAt
	colAvailableAt
	colCreatedAt
	colUpdatedAt
	colDoneAt
	colLastError
	colLockedBy
	colLockedAt
	colLockedUntil
	colErrorGroup
	colIdempotencyKey
	colSeq
	logColumns // how many
)

var logColumnNames = [logColumns]string{
	colEventID: "event_id", colEventType: "event_type", colTopic: "topic",
	colAggregateType: "aggregate_type", colAggregateID: "aggregate_id", colTenantID: "tenant_id",
	colPayload: "payload", colPayloadJSON: "payload_json", colPayloadDoc: "payload_doc",
	colHeaders: "headers", colStatus: "status", colAttempts: "attempts",
	colOccurredAt: "occurred_at", colAvailableAt: "available_at", colCreatedAt: "created_at",
	colUpdatedAt: "updated_at", colDoneAt: "done_at", colLastError: "last_error",
	colLockedBy: "locked_by", colLockedAt: "locked_at", colLockedUntil: "locked_until",
	colErrorGroup: "error_group", colIdempotencyKey: "idempotency_key", colSeq: "seq",
}

// logLayout is where each column a row reads stands in the outbox
// table's tuples, -1 for a column the table does not have.
type logLayout [logColumns]int

func newLogLayout(columns []*pglogrepl.RelationMessageColumn) *logLayout {
	var l logLayout
	for i := range l {
		l[i] = -1
	}
	for i, c := range columns {
		for j, name := range logColumnNames {
			if c.Name == name {
				l[j] = i
			}
		}
	}
	return &l
}

// maxRowsHint bounds the room made for a transaction's rows before they
// come.
const maxRowsHint = 1000

// logTx is a transaction the stream completed: the rows it inserted into
// the outbox table (none when it wrote only other tables), when it
// committed and where it ends in the log.
type logTx struct {
	rows       []outboxdriver.Row
	commitTime time.Time
	end        pglogrepl.LSN
}

// logDecoder reads the pgoutput messages (protocol version 1) of one
// streaming session: it learns the outbox table's layout from its
// Relation message and gathers the inserts between a Begin and a Commit.
// Other tables of the publication, and messages other than Relation,
// Begin, Insert and Commit, are passed over.
type logDecoder struct {
	schema, table string // the outbox table, as the server names it

	layouts map[uint32]*logLayout // by relation id, the outbox table's only
	open    bool                  // between a Begin and its Commit
	rows    []outboxdriver.Row
	// rowsHint is the room made for a transaction's rows.
	rowsHint int

	// Reused from row to row: the columns of the tuple being read, the
	// scan plans, and each text column's last value (see repeated).
	columns            []tupleColumn
	timePlan, bytePlan pgtype.ScanPlan
	last               [logColumns]repeated
}

// tupleColumn is a column of an inserted tuple: its kind (pglogrepl's
// TupleDataType) and its text, which points into the message.
type tupleColumn struct {
	kind uint8
	data []byte
}

func newLogDecoder(schema, table string) *logDecoder {
	types := pgtype.NewMap()
	return &logDecoder{
		schema: schema, table: table, layouts: make(map[uint32]*logLayout),
		timePlan: types.PlanScan(pgtype.TimestamptzOID, pgtype.TextFormatCode, &pgtype.Timestamptz{}),
		bytePlan: types.PlanScan(pgtype.ByteaOID, pgtype.TextFormatCode, &[]byte{}),
	}
}

// decode reads one message, and returns the transaction it completes, or
// nil. An error is a message pgoutput does not send. The message's bytes
// are not kept.
func (d *logDecoder) decode(data []byte) (*logTx, error) {
	if len(data) > 0 && data[0] == byte(pglogrepl.MessageTypeInsert) {
		return nil, d.insert(data[1:])
	}
	msg, err := pglogrepl.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("decode a pgoutput message: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		if m.Namespace == d.schema && m.RelationName == d.table {
			d.layouts[m.RelationID] = newLogLayout(m.Columns)
		} else {
			delete(d.layouts, m.RelationID) // an id may be reused after a drop
		}
	case *pglogrepl.BeginMessage:
		d.open, d.rows = true, nil
	case *pglogrepl.CommitMessage:
		tx := &logTx{rows: d.rows, commitTime: m.CommitTime, end: m.TransactionEndLSN}
		if len(d.rows) > 0 {
			d.rowsHint = min(len(d.rows), maxRowsHint)
		}
		d.open, d.rows = false, nil
		return tx, nil
	}
	return nil, nil
}

// insert reads an Insert message (after its type byte): the relation,
// 'N', the number of columns, and each column's kind and, for text and
// binary, its length and bytes. pglogrepl's decoding would allocate
// twice per column; a backlog streams thousands of rows a second.
func (d *logDecoder) insert(src []byte) error {
	if len(src) < 7 || src[4] != 'N' {
		return errors.New("decode a pgoutput insert: no new tuple")
	}
	l := d.layouts[binary.BigEndian.Uint32(src)]
	if l == nil || !d.open {
		return nil // another table's
	}
	n := int(binary.BigEndian.Uint16(src[5:]))
	d.columns = d.columns[:0]
	for i, at := 0, 7; i < n; i++ {
		if at >= len(src) {
			return errors.New("decode a pgoutput insert: truncated")
		}
		c := tupleColumn{kind: src[at]}
		at++
		if c.kind == pglogrepl.TupleDataTypeText || c.kind == pglogrepl.TupleDataTypeBinary {
			if at+4 > len(src) {
				return errors.New("decode a pgoutput insert: truncated")
			}
			size := int(binary.BigEndian.Uint32(src[at:]))
			at += 4
			if size < 0 || size > len(src)-at {
				return errors.New("decode a pgoutput insert: truncated")
			}
			c.data, at = src[at:at+size], at+size
		}
		d.columns = append(d.columns, c)
	}
	if d.rows == nil {
		// As many as the last transaction had: writers tend to write
		// alike, and a backlog's rows are large to grow into.
		d.rows = make([]outboxdriver.Row, 0, d.rowsHint)
	}
	d.rows = append(d.rows, d.row(l, d.columns))
	return nil
}

// row decodes an inserted tuple as a claim would read its row. A value
// that cannot be read leaves the row Malformed, with the first reason.
func (d *logDecoder) row(l *logLayout, columns []tupleColumn) outboxdriver.Row {
	v := tupleValues{d: d, layout: l, columns: columns}
	r := outboxdriver.Row{
		ID:             v.text(colEventID),
		Type:           v.text(colEventType),
		Topic:          v.text(colTopic),
		AggregateType:  v.text(colAggregateType),
		AggregateID:    v.text(colAggregateID),
		TenantID:       v.text(colTenantID),
		Payload:        v.bytea(colPayload),
		PayloadJSON:    v.bool(colPayloadJSON),
		Headers:        v.text(colHeaders),
		Status:         int16(v.int(colStatus, 16)),
		Attempts:       int(v.int(colAttempts, 32)),
		OccurredAt:     v.time(colOccurredAt),
		AvailableAt:    v.time(colAvailableAt),
		CreatedAt:      v.time(colCreatedAt),
		UpdatedAt:      v.time(colUpdatedAt),
		DoneAt:         v.time(colDoneAt),
		LastError:      v.text(colLastError),
		LockedBy:       v.text(colLockedBy),
		LockedAt:       v.time(colLockedAt),
		LockedUntil:    v.time(colLockedUntil),
		ErrorGroup:     v.text(colErrorGroup),
		IdempotencyKey: v.text(colIdempotencyKey),
		Seq:            v.int(colSeq, 64),
	}
	if doc, ok := v.value(colPayloadDoc); ok {
		r.Payload = storedPayload(r.Payload, bytes.Clone(doc))
	}
	r.Malformed = v.err
	return r
}

// tupleValues reads the columns of one tuple, in pgoutput's text format,
// and keeps the first reason a value could not be read.
type tupleValues struct {
	d       *logDecoder
	layout  *logLayout
	columns []tupleColumn
	err     error
}

// value returns column col's text, and false for NULL or a column the
// table does not have.
func (v *tupleValues) value(col int) ([]byte, bool) {
	i := v.layout[col]
	if i < 0 || i >= len(v.columns) {
		return nil, false
	}
	c := v.columns[i]
	switch c.kind {
	case pglogrepl.TupleDataTypeText:
		return c.data, true
	case pglogrepl.TupleDataTypeNull:
		return nil, false
	}
	v.fail(fmt.Errorf("%s came as %q, not as text", logColumnNames[col], c.kind))
	return nil, false
}

func (v *tupleValues) fail(err error) {
	if v.err == nil {
		v.err = err
	}
}

// text returns column col's text, "" for NULL: the string of the row
// before when it is the same (an event type, a topic).
func (v *tupleValues) text(col int) string {
	b, _ := v.value(col)
	last := &v.d.last[col]
	_ = last.ScanBytes(b)
	return string(*last)
}

func (v *tupleValues) bytea(col int) []byte {
	b, ok := v.value(col)
	if !ok {
		return []byte{}
	}
	var out []byte
	if err := v.d.bytePlan.Scan(b, &out); err != nil {
		v.fail(fmt.Errorf("%s: %w", logColumnNames[col], err))
	}
	if out == nil {
		out = []byte{}
	}
	return out
}

func (v *tupleValues) bool(col int) bool {
	b, ok := v.value(col)
	if !ok {
		return false
	}
	switch string(b) {
	case "t":
		return true
	case "f":
		return false
	}
	v.fail(fmt.Errorf("%s is %q, not a boolean", logColumnNames[col], b))
	return false
}

func (v *tupleValues) int(col, bits int) int64 {
	b, ok := v.value(col)
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(string(b), 10, bits)
	if err != nil {
		v.fail(fmt.Errorf("%s: %w", logColumnNames[col], err))
	}
	return n
}

// time reads a timestamptz as pgx reads it in binary (in time.Local), so
// that a decoded row equals the row a claim reads; the zero time for
// NULL.
func (v *tupleValues) time(col int) time.Time {
	b, ok := v.value(col)
	if !ok {
		return time.Time{}
	}
	var ts pgtype.Timestamptz
	if err := v.d.timePlan.Scan(b, &ts); err != nil {
		v.fail(fmt.Errorf("%s: %w", logColumnNames[col], err))
		return time.Time{}
	}
	return finite(logColumnNames[col], ts, &v.err)
}
