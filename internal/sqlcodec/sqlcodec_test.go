package sqlcodec

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
)

func TestHexIDs(t *testing.T) {
	t.Parallel()
	require.Equal(t, "[]", HexIDs(nil))
	require.Equal(t, `["61","20ff"]`, HexIDs([]string{"a", " \xff"}), "bytes that are not UTF-8 survive")
}

func TestDeadFilter(t *testing.T) {
	t.Parallel()
	died := time.UnixMicro(1_700_000_000_000_001)
	require.Equal(t, []any{nil, nil, nil, nil}, DeadFilter(outbox.DeadFilter{}), "no filter: every value NULL")
	require.Equal(t, []any{"[]", " ", " ", Micros(died)},
		DeadFilter(outbox.DeadFilter{IDs: []string{}, EventType: " ", Topic: " ", DiedBefore: died}),
		"an empty id list and blank names filter")
}

func TestStatusUpdatesLeaveOutWhatIsNotSet(t *testing.T) {
	t.Parallel()
	next := time.UnixMicro(5)
	retry := outbox.Retry("r", next, nil)
	retry.Attempt = 3
	batch, err := StatusUpdates([]outbox.StatusUpdate{retry, outbox.Defer("d", next, errors.New("later"))})
	require.NoError(t, err)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(batch), &rows))
	require.Equal(t, []map[string]any{
		{"id": "72", "status": 2.0, "spent": 1.0, "next_at": 5.0, "before": 2.0},
		{"id": "64", "status": 0.0, "spent": 0.0, "next_at": 5.0, "error": "later"},
	}, rows, "no error, no attempt count: absent, which the statements read as NULL")
}

func TestTopicVariant(t *testing.T) {
	t.Parallel()
	variants := [3]string{"any", "one", "many"}
	for _, c := range []struct {
		topics []string
		query  string
		arg    any
	}{
		{nil, "any", nil},
		{[]string{"a"}, "one", "a"},
		{[]string{"a", "b"}, "many", `["a","b"]`},
	} {
		query, arg := TopicVariant(variants, c.topics)
		require.Equal(t, c.query, query)
		require.Equal(t, c.arg, arg)
	}
}

func TestInsertValues(t *testing.T) {
	t.Parallel()
	now := time.UnixMicro(1_000_000)
	e := outbox.NewBytes("T", nil)
	e.ID, e.Topic, e.OccurredAt = "id", "t", now
	lease := outbox.Lease{Owner: "me", Duration: time.Second}

	values, size, err := InsertValues(&e, false, lease, now)
	require.NoError(t, err)
	require.Equal(t, []any{"id", "T", "t", "", nil, nil, []byte{}, false, nil,
		Micros(now), Micros(now), Micros(now), Micros(now), nil, nil, nil}, values)
	require.Zero(t, size)

	e.DeliverAfter, e.Headers, e.AggregateID = now.Add(time.Minute), map[string]string{"k": "v"}, " "
	values, size, err = InsertValues(&e, true, lease, now)
	require.NoError(t, err)
	require.Equal(t, []any{"id", "T", "t", "", " ", nil, []byte{}, false, `{"k":"v"}`,
		Micros(now), Micros(now.Add(time.Minute)), Micros(now), Micros(now),
		"me", Micros(now), Micros(now.Add(time.Second))}, values, "a blank aggregate id is one")
	require.Equal(t, len(`{"k":"v"}`), size)
}
