package sqlcodec

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

func TestHexIDs(t *testing.T) {
	t.Parallel()
	require.Equal(t, "[]", HexIDs(nil))
	require.Equal(t, `["61","20ff"]`, HexIDs([]string{"a", " \xff"}), "bytes that are not UTF-8 survive")
}

func TestDeadFilter(t *testing.T) {
	t.Parallel()
	died := time.UnixMicro(1_700_000_000_000_001)
	require.Equal(t, []any{nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}, DeadFilter(outboxdriver.DeadFilter{}),
		"no filter: every value NULL")
	require.Equal(t, []any{"[]", " ", " ", Micros(died), " ", " ", "% !%!_!! %", " ", 1, Micros(died.Add(-time.Hour))},
		DeadFilter(outboxdriver.DeadFilter{IDs: []string{}, EventType: " ", Topic: " ", DiedBefore: died,
			AggregateType: " ", AggregateID: " ", ErrorContains: " %_! ", Group: " ", Ungrouped: true, DiedAfter: died.Add(-time.Hour)}),
		"an empty id list and blank names filter; the error is a LIKE pattern")
	require.Equal(t, []any{nil, nil, nil, nil, nil, nil, "%timeout%", nil, nil, nil},
		DeadFilter(outboxdriver.DeadFilter{ErrorContains: "TimeOut"}), "in lower case")
}

func TestOutcomesLeaveOutWhatIsNotSet(t *testing.T) {
	t.Parallel()
	next := time.UnixMicro(5)
	batch := Outcomes([]outboxdriver.Outcome{
		{ID: "r", Status: 2, AttemptSpent: true, NextAt: next, AttemptsChecked: true, AttemptsBefore: 2},
		{ID: "d", Status: 0, NextAt: next, Error: "later"},
		{ID: "x", Status: 3, AttemptSpent: true, Error: "gone", ErrorGroup: "0123456789abcdef"},
		{ID: "y", Status: 3, AttemptSpent: true, ErrorGroup: "0123456789abcdef"},
	})
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(batch), &rows))
	require.Equal(t, []map[string]any{
		{"id": "72", "status": 2.0, "spent": 1.0, "next_at": 5.0, "before": 2.0},
		{"id": "64", "status": 0.0, "spent": 0.0, "next_at": 5.0, "error": "later"},
		{"id": "78", "status": 3.0, "spent": 1.0, "error": "gone", "group": "0123456789abcdef"},
		{"id": "79", "status": 3.0, "spent": 1.0},
	}, rows, "no error (and then no group), no next time, no attempt check: absent, which the statements read as NULL")
}

func TestInsertValues(t *testing.T) {
	t.Parallel()
	now := time.UnixMicro(1_000_000)
	p := &outboxdriver.InsertParams{Now: now, Owner: "me", LockedUntil: now.Add(time.Second)}
	r := outboxdriver.InsertRow{ID: "id", Type: "T", Topic: "t", Payload: []byte{}, OccurredAt: now, AvailableAt: now}

	values, size := InsertValues(&r, p)
	require.Equal(t, []any{"id", "T", "t", "", nil, nil, []byte{}, false, nil,
		Micros(now), Micros(now), Micros(now), Micros(now), nil, nil, nil, nil}, values, "unclaimed: no lease, no key")
	require.Zero(t, size)

	r.AvailableAt, r.Headers, r.AggregateID, r.Claimed, r.IdempotencyKey = now.Add(time.Minute), `{"k":"v"}`, " ", true, "cmd-1"
	values, size = InsertValues(&r, p)
	require.Equal(t, []any{"id", "T", "t", "", " ", nil, []byte{}, false, `{"k":"v"}`,
		Micros(now), Micros(now.Add(time.Minute)), Micros(now), Micros(now),
		"me", Micros(now), Micros(now.Add(time.Second)), "cmd-1"}, values, "a blank aggregate id is one; a claimed row has p's lease")
	require.Equal(t, len(`{"k":"v"}`), size)
}
