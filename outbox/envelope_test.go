package outbox_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// jsonStringOfSize returns a JSON string literal of exactly n bytes.
func jsonStringOfSize(n int) []byte {
	return []byte(`"` + strings.Repeat("a", n-2) + `"`)
}

var prepareNow = time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.UTC)

// Limits of the text fields, in characters, as [outbox.Envelope] documents
// them.
const (
	maxEventTypeLen     = 128
	maxTopicLen         = 255
	maxAggregateTypeLen = 64
	maxAggregateIDLen   = 128
	maxTenantIDLen      = 64
	maxIdempotencyKey   = 255
)

func TestPrepareValidation(t *testing.T) {
	t.Parallel()

	const (
		twoByte = "é" // two bytes, one character
		// invalid is not valid UTF-8.
		invalid = "a\xffb"
	)

	tests := []struct {
		name   string
		modify func(e *outbox.Envelope)
		field  string // "" when the envelope is valid
	}{
		{"valid", func(*outbox.Envelope) {}, ""},
		{"empty type", func(e *outbox.Envelope) { e.Type = "" }, "Type"},
		{"missing payload", func(e *outbox.Envelope) { e.PayloadJSON, e.PayloadBytes = nil, nil }, "PayloadJSON"},
		{"doubled payload", func(e *outbox.Envelope) { e.PayloadBytes = []byte("x") }, "PayloadBytes"},
		{"doubled payload, both empty", func(e *outbox.Envelope) { e.PayloadJSON, e.PayloadBytes = []byte{}, []byte{} }, "PayloadBytes"},
		{"empty bytes payload", func(e *outbox.Envelope) { e.PayloadJSON, e.PayloadBytes = nil, []byte{} }, ""},
		{"empty JSON payload is invalid JSON", func(e *outbox.Envelope) { e.PayloadJSON = []byte{} }, "PayloadJSON"},
		{"JSON payload of exactly 1 MiB", func(e *outbox.Envelope) { e.PayloadJSON = jsonStringOfSize(outbox.MaxPayloadSize) }, ""},
		{"bytes payload of exactly 1 MiB", func(e *outbox.Envelope) {
			e.PayloadJSON, e.PayloadBytes = nil, make([]byte, outbox.MaxPayloadSize)
		}, ""},
		{"JSON payload of 1 MiB + 1", func(e *outbox.Envelope) { e.PayloadJSON = jsonStringOfSize(outbox.MaxPayloadSize + 1) }, "PayloadJSON"},
		{"bytes payload of 1 MiB + 1", func(e *outbox.Envelope) {
			e.PayloadJSON, e.PayloadBytes = nil, make([]byte, outbox.MaxPayloadSize+1)
		}, "PayloadBytes"},
		{"invalid JSON", func(e *outbox.Envelope) { e.PayloadJSON = []byte(`{"order":`) }, "PayloadJSON"},
		{"two JSON documents", func(e *outbox.Envelope) { e.PayloadJSON = []byte(`{} {}`) }, "PayloadJSON"},
		{"JSON scalar", func(e *outbox.Envelope) { e.PayloadJSON = []byte(`42`) }, ""},
		{"bytes payload need not be JSON", func(e *outbox.Envelope) { e.PayloadJSON, e.PayloadBytes = nil, []byte{0xff, 0, 1} }, ""},

		{"headers", func(e *outbox.Envelope) { e.Headers = map[string]string{"trace": "abc", "empty": ""} }, ""},
		{"empty header key", func(e *outbox.Envelope) { e.Headers = map[string]string{"a": "1", "": "x"} }, "Headers"},
		{"NUL in header key", func(e *outbox.Envelope) { e.Headers = map[string]string{"a\x00b": "x"} }, "Headers"},
		{"NUL in header value", func(e *outbox.Envelope) { e.Headers = map[string]string{"a": "x\x00"} }, "Headers"},
		{"invalid UTF-8 in header key", func(e *outbox.Envelope) { e.Headers = map[string]string{invalid: "x"} }, "Headers"},
		{"invalid UTF-8 in header value", func(e *outbox.Envelope) { e.Headers = map[string]string{"a": invalid} }, "Headers"},
		{"headers of exactly 1 MiB", func(e *outbox.Envelope) {
			e.Headers = map[string]string{"a": strings.Repeat("x", outbox.MaxHeadersSize/2-1), "b": strings.Repeat("y", outbox.MaxHeadersSize/2-1)}
		}, ""},
		{"headers of 1 MiB + 1", func(e *outbox.Envelope) {
			e.Headers = map[string]string{"a": strings.Repeat("x", outbox.MaxHeadersSize/2-1), "b": strings.Repeat("y", outbox.MaxHeadersSize/2)}
		}, "Headers"},

		{"occurred in year 9999", func(e *outbox.Envelope) { e.OccurredAt = time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC) }, ""},
		{"occurred in year 10000", func(e *outbox.Envelope) { e.OccurredAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "OccurredAt"},
		{"occurred in year 0", func(e *outbox.Envelope) { e.OccurredAt = time.Date(0, 12, 31, 0, 0, 0, 0, time.UTC) }, "OccurredAt"},
		{"occurred in year 1", func(e *outbox.Envelope) { e.OccurredAt = time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC) }, ""},
		{"delivered in year 10000 by UTC", func(e *outbox.Envelope) {
			e.DeliverAfter = time.Date(9999, 12, 31, 23, 0, 0, 0, time.FixedZone("", -2*3600))
		}, "DeliverAfter"},
		{"delivered past what microseconds since 1970 can count", func(e *outbox.Envelope) {
			e.DeliverAfter = time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)
		}, "DeliverAfter"},
		{"delivered in a minute", func(e *outbox.Envelope) { e.DeliverIn = time.Minute }, ""},
		{"delivered in a negative duration", func(e *outbox.Envelope) { e.DeliverIn = -time.Nanosecond }, "DeliverIn"},
		{"delivered in a duration and after a time", func(e *outbox.Envelope) {
			e.DeliverIn, e.DeliverAfter = time.Minute, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		}, "DeliverIn"},
		{"NUL in AggregateID", func(e *outbox.Envelope) { e.AggregateID = "order\x0042" }, "AggregateID"},
		{"NUL in ID", func(e *outbox.Envelope) { e.ID = "\x00" }, "ID"},
		{"NUL in Type", func(e *outbox.Envelope) { e.Type = "Order\x00Created" }, "Type"},
		{"invalid UTF-8 in ID", func(e *outbox.Envelope) { e.ID = invalid }, "ID"},
		{"invalid UTF-8 in Type", func(e *outbox.Envelope) { e.Type = invalid }, "Type"},
		{"invalid UTF-8 in Topic", func(e *outbox.Envelope) { e.Topic = invalid }, "Topic"},
		{"invalid UTF-8 in AggregateType", func(e *outbox.Envelope) { e.AggregateType = invalid }, "AggregateType"},
		{"invalid UTF-8 in AggregateID", func(e *outbox.Envelope) { e.AggregateID = invalid }, "AggregateID"},
		{"invalid UTF-8 in TenantID", func(e *outbox.Envelope) { e.TenantID = invalid }, "TenantID"},
		{"invalid UTF-8 in IdempotencyKey", func(e *outbox.Envelope) { e.IdempotencyKey = invalid }, "IdempotencyKey"},
		{"NUL in IdempotencyKey", func(e *outbox.Envelope) { e.IdempotencyKey = "a\x00b" }, "IdempotencyKey"},

		// Every length limit at its boundary, counted in characters.
		{"ID of 36 characters", func(e *outbox.Envelope) { e.ID = strings.Repeat("x", 36) }, ""},
		{"ID of 37 characters", func(e *outbox.Envelope) { e.ID = strings.Repeat("x", 37) }, "ID"},
		{"ID of 36 two-byte characters", func(e *outbox.Envelope) { e.ID = strings.Repeat(twoByte, outbox.MaxEventIDLen) }, ""},
		{"ID of 37 two-byte characters", func(e *outbox.Envelope) { e.ID = strings.Repeat(twoByte, outbox.MaxEventIDLen+1) }, "ID"},
		{"Type at limit", func(e *outbox.Envelope) { e.Type = outbox.EventType(strings.Repeat(twoByte, maxEventTypeLen)) }, ""},
		{"Type over limit", func(e *outbox.Envelope) { e.Type = outbox.EventType(strings.Repeat("t", maxEventTypeLen+1)) }, "Type"},
		{"Topic at limit", func(e *outbox.Envelope) { e.Topic = strings.Repeat(twoByte, maxTopicLen) }, ""},
		{"Topic over limit", func(e *outbox.Envelope) { e.Topic = strings.Repeat("t", maxTopicLen+1) }, "Topic"},
		{"AggregateType at limit", func(e *outbox.Envelope) {
			e.AggregateType = outbox.AggregateType(strings.Repeat(twoByte, maxAggregateTypeLen))
		}, ""},
		{"AggregateType over limit", func(e *outbox.Envelope) {
			e.AggregateType = outbox.AggregateType(strings.Repeat("a", maxAggregateTypeLen+1))
		}, "AggregateType"},
		{"AggregateID at limit", func(e *outbox.Envelope) { e.AggregateID = strings.Repeat(twoByte, maxAggregateIDLen) }, ""},
		{"AggregateID over limit", func(e *outbox.Envelope) { e.AggregateID = strings.Repeat("a", maxAggregateIDLen+1) }, "AggregateID"},
		{"TenantID at limit", func(e *outbox.Envelope) { e.TenantID = strings.Repeat(twoByte, maxTenantIDLen) }, ""},
		{"TenantID over limit", func(e *outbox.Envelope) { e.TenantID = strings.Repeat("t", maxTenantIDLen+1) }, "TenantID"},
		{"IdempotencyKey at limit", func(e *outbox.Envelope) { e.IdempotencyKey = strings.Repeat(twoByte, maxIdempotencyKey) }, ""},
		{"IdempotencyKey over limit", func(e *outbox.Envelope) { e.IdempotencyKey = strings.Repeat("k", maxIdempotencyKey+1) }, "IdempotencyKey"},
		{"long header key and value", func(e *outbox.Envelope) {
			e.Headers = map[string]string{strings.Repeat("k", 10000): strings.Repeat(twoByte, 10000)}
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			bad := validEnvelope()
			tt.modify(&bad)
			batch := []outbox.Envelope{validEnvelope(), validEnvelope(), bad, validEnvelope()}

			prepared, err := outbox.Prepare(batch, prepareNow)
			if tt.field == "" {
				require.NoError(t, err)
				require.Len(t, prepared, len(batch))
				return
			}
			require.Error(t, err)
			require.Nil(t, prepared, "nothing of the batch is returned")
			require.ErrorIs(t, err, outbox.ErrInvalidEnvelope)
			var verr *outbox.ValidationError
			require.ErrorAs(t, err, &verr)
			require.Equal(t, 2, verr.Index)
			require.Equal(t, tt.field, verr.Field)
			require.NotEmpty(t, verr.Reason)
			require.Contains(t, err.Error(), "envelope 2")
		})
	}
}

func TestPrepareReportsFirstInvalidEnvelope(t *testing.T) {
	t.Parallel()

	batch := []outbox.Envelope{validEnvelope(), {Type: "NoPayload"}, {PayloadBytes: []byte{}}}
	_, err := outbox.Prepare(batch, prepareNow)
	var verr *outbox.ValidationError
	require.ErrorAs(t, err, &verr)
	require.Equal(t, 1, verr.Index)
	require.Equal(t, "PayloadJSON", verr.Field)
}

func TestValidationError(t *testing.T) {
	t.Parallel()

	err := &outbox.ValidationError{Index: 3, Field: "Topic", Reason: "too long"}
	require.ErrorIs(t, err, outbox.ErrInvalidEnvelope)
	require.NotErrorIs(t, err, outbox.ErrInvalidRequest)
	require.Equal(t, "outbox: invalid envelope 3: Topic: too long", err.Error())

	wrapped := errors.Join(errors.New("other"), err)
	require.ErrorIs(t, wrapped, outbox.ErrInvalidEnvelope)
}

func TestPrepareDefaults(t *testing.T) {
	t.Parallel()

	prepared, err := outbox.Prepare([]outbox.Envelope{validEnvelope()}, prepareNow)
	require.NoError(t, err)
	require.Len(t, prepared, 1)
	e := prepared[0]

	require.Len(t, e.ID, 26)
	_, err = ulid.ParseStrict(e.ID)
	require.NoError(t, err, "default id is a ULID")
	require.Equal(t, outbox.EventType("OrderCreated"), e.Type)
	require.Equal(t, "OrderCreated", e.Topic, "topic defaults to the type")
	require.Equal(t, prepareNow.Truncate(time.Microsecond), e.OccurredAt, "the writer's clock, to the microsecond")
	require.Equal(t, outbox.GlobalAggregate, e.AggregateType)
	require.Equal(t, outbox.AggregateType("__GLOBAL__"), e.AggregateType)
	require.Empty(t, e.AggregateID)
	require.Empty(t, e.TenantID)
	require.Nil(t, e.Headers)
	require.True(t, e.DeliverAfter.IsZero())
	require.Equal(t, `{"order":42}`, string(e.PayloadJSON))
	require.Nil(t, e.PayloadBytes)
}

func TestPrepareKeepsGivenValues(t *testing.T) {
	t.Parallel()

	occurred := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	deliver := prepareNow.Add(time.Hour)
	in := outbox.Envelope{
		ID:            "8d2d7b6e-0b4c-4a43-9b83-8f3e2a1c5d7f",
		Type:          "OrderCreated",
		Topic:         "orders",
		OccurredAt:    occurred,
		AggregateType: "Order",
		AggregateID:   "42",
		TenantID:      "acme",
		Headers:       map[string]string{"trace": "abc"},
		PayloadBytes:  []byte("raw"),
		DeliverAfter:  deliver,
	}
	prepared, err := outbox.Prepare([]outbox.Envelope{in}, prepareNow)
	require.NoError(t, err)
	require.Equal(t, in, prepared[0])
}

// The stores keep times to the microsecond: the hot path, which hands out
// the prepared envelopes, must carry the same times as the rows.
func TestPrepareKeepsTimesToTheMicrosecond(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	e := validEnvelope()
	e.OccurredAt, e.DeliverAfter = at, at.Add(time.Hour)
	prepared, err := outbox.Prepare([]outbox.Envelope{e}, prepareNow)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC), prepared[0].OccurredAt)
	require.Equal(t, time.Date(2026, 1, 2, 4, 4, 5, 123456000, time.UTC), prepared[0].DeliverAfter)
}

// DeliverIn is resolved with the writer's clock into DeliverAfter, to the
// microsecond, and is zero in the prepared envelope: what a claim reads
// back, and what the hot path would hand out.
func TestPrepareResolvesDeliverIn(t *testing.T) {
	t.Parallel()
	e := validEnvelope()
	e.DeliverIn = 90*time.Second + 1500*time.Nanosecond
	prepared, err := outbox.Prepare([]outbox.Envelope{e}, prepareNow)
	require.NoError(t, err)
	require.Equal(t, prepareNow.Add(90*time.Second+time.Microsecond), prepared[0].DeliverAfter, "to the microsecond")
	require.Zero(t, prepared[0].DeliverIn)
	require.Equal(t, 90*time.Second+1500*time.Nanosecond, e.DeliverIn, "the caller's envelope is left alone")
}

// A DeliverAfter not after the write is due at once, as if zero: the hot
// path takes the event, and the relays are told of it.
func TestPrepareDeliverAfterInThePastIsAtOnce(t *testing.T) {
	t.Parallel()
	for _, at := range []time.Time{prepareNow.Add(-time.Hour), prepareNow} {
		e := validEnvelope()
		e.DeliverAfter = at
		prepared, err := outbox.Prepare([]outbox.Envelope{e}, prepareNow)
		require.NoError(t, err)
		require.True(t, prepared[0].DeliverAfter.IsZero(), "%v", at)
	}
}

func TestPrepareIDsAreMonotonic(t *testing.T) {
	t.Parallel()
	batch := make([]outbox.Envelope, 1000)
	for i := range batch {
		batch[i] = validEnvelope()
	}
	first, err := outbox.Prepare(batch, prepareNow)
	require.NoError(t, err)
	second, err := outbox.Prepare(batch, prepareNow)
	require.NoError(t, err)

	all := slices.Concat(first, second)
	for i := 1; i < len(all); i++ {
		require.Less(t, all[i-1].ID, all[i].ID, "id %d", i)
	}
	for _, e := range batch {
		require.Empty(t, e.ID, "the caller's envelopes are not modified")
	}
}

func TestPrepareIDsAreMonotonicUnderConcurrency(t *testing.T) {
	t.Parallel()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = outbox.Prepare([]outbox.Envelope{validEnvelope()}, prepareNow)
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()

	for range 3 {
		batch := make([]outbox.Envelope, 5000)
		for i := range batch {
			batch[i] = validEnvelope()
		}
		prepared, err := outbox.Prepare(batch, prepareNow)
		require.NoError(t, err)
		for i := 1; i < len(prepared); i++ {
			if prepared[i-1].ID >= prepared[i].ID {
				t.Fatalf("id %d of a batch: %s not after %s", i, prepared[i].ID, prepared[i-1].ID)
			}
		}
	}
}

func TestPrepareEmptyBatch(t *testing.T) {
	t.Parallel()

	prepared, err := outbox.Prepare(nil, prepareNow)
	require.NoError(t, err)
	require.Empty(t, prepared)
}

func TestPrepareCopies(t *testing.T) {
	t.Parallel()

	t.Run("headers and JSON payload", func(t *testing.T) {
		t.Parallel()

		headers := map[string]string{"trace": "abc"}
		payload := []byte(`{"order":42}`)
		prepared, err := outbox.Prepare([]outbox.Envelope{{Type: "T", Headers: headers, PayloadJSON: payload}}, prepareNow)
		require.NoError(t, err)

		headers["trace"] = "changed"
		headers["added"] = "x"
		copy(payload, `{"order":99}`)

		require.Equal(t, map[string]string{"trace": "abc"}, prepared[0].Headers)
		require.Equal(t, `{"order":42}`, string(prepared[0].PayloadJSON))
	})

	t.Run("bytes payload", func(t *testing.T) {
		t.Parallel()

		payload := []byte("abc")
		prepared, err := outbox.Prepare([]outbox.Envelope{outbox.NewBytes("T", payload)}, prepareNow)
		require.NoError(t, err)
		payload[0] = 'X'
		require.Equal(t, "abc", string(prepared[0].PayloadBytes))
	})

	t.Run("changing the result leaves the input alone", func(t *testing.T) {
		t.Parallel()

		in := outbox.Envelope{Type: "T", Headers: map[string]string{"k": "v"}, PayloadBytes: []byte("abc")}
		prepared, err := outbox.Prepare([]outbox.Envelope{in}, prepareNow)
		require.NoError(t, err)
		prepared[0].Headers["k"] = "changed"
		prepared[0].PayloadBytes[0] = 'X'
		require.Equal(t, map[string]string{"k": "v"}, in.Headers)
		require.Equal(t, "abc", string(in.PayloadBytes))
	})

	t.Run("nil and empty payloads", func(t *testing.T) {
		t.Parallel()

		prepared, err := outbox.Prepare([]outbox.Envelope{outbox.NewBytes("T", []byte{})}, prepareNow)
		require.NoError(t, err)
		require.NotNil(t, prepared[0].PayloadBytes, "an empty payload stays empty, not nil")
		require.Empty(t, prepared[0].PayloadBytes)
		require.Nil(t, prepared[0].PayloadJSON)
		require.False(t, prepared[0].IsJSON())

		_, err = outbox.Prepare([]outbox.Envelope{outbox.NewBytes("T", nil)}, prepareNow)
		require.ErrorIs(t, err, outbox.ErrInvalidEnvelope, "a nil payload is a missing payload")
	})

	t.Run("empty headers become nil", func(t *testing.T) {
		t.Parallel()

		in := validEnvelope()
		in.Headers = map[string]string{}
		prepared, err := outbox.Prepare([]outbox.Envelope{in}, prepareNow)
		require.NoError(t, err)
		require.Nil(t, prepared[0].Headers)
	})
}

func TestConstructors(t *testing.T) {
	t.Parallel()

	j := outbox.NewJSON("A", []byte(`[1]`))
	require.Equal(t, outbox.Envelope{Type: "A", PayloadJSON: []byte(`[1]`)}, j)
	require.True(t, j.IsJSON())
	require.Equal(t, []byte(`[1]`), j.Payload())

	b := outbox.NewBytes("B", []byte{1, 2})
	require.Equal(t, outbox.Envelope{Type: "B", PayloadBytes: []byte{1, 2}}, b)
	require.False(t, b.IsJSON())
	require.Equal(t, []byte{1, 2}, b.Payload())

	empty := outbox.NewJSON("C", []byte{})
	require.True(t, empty.IsJSON(), "a non-nil empty JSON payload is still JSON")

	var none outbox.Envelope
	require.False(t, none.IsJSON())
	require.Nil(t, none.Payload())
}

// countingMarshaler counts how often encoding/json encodes it.
type countingMarshaler struct{ calls *int }

func (c countingMarshaler) MarshalJSON() ([]byte, error) {
	*c.calls++
	return []byte(`{"n":1}`), nil
}

func TestMarshalJSON(t *testing.T) {
	t.Parallel()

	t.Run("encodes", func(t *testing.T) {
		t.Parallel()

		e, err := outbox.MarshalJSON("OrderCreated", struct {
			Order int    `json:"order"`
			Note  string `json:"note"`
		}{42, "<&>"})
		require.NoError(t, err)
		require.Equal(t, outbox.EventType("OrderCreated"), e.Type)
		require.True(t, e.IsJSON())
		require.Nil(t, e.PayloadBytes)
		require.JSONEq(t, `{"order":42,"note":"<&>"}`, string(e.PayloadJSON))

		_, err = outbox.Prepare([]outbox.Envelope{e}, prepareNow)
		require.NoError(t, err)
	})

	t.Run("encodes once", func(t *testing.T) {
		t.Parallel()

		calls := 0
		e, err := outbox.MarshalJSON("T", countingMarshaler{&calls})
		require.NoError(t, err)
		require.Equal(t, 1, calls)
		prepared, err := outbox.Prepare([]outbox.Envelope{e}, prepareNow)
		require.NoError(t, err)
		require.Equal(t, 1, calls)
		require.Equal(t, `{"n":1}`, string(prepared[0].Payload()))
	})

	t.Run("error", func(t *testing.T) {
		t.Parallel()

		_, err := outbox.MarshalJSON("OrderCreated", make(chan int))
		require.Error(t, err)
		var unsupported *json.UnsupportedTypeError
		require.ErrorAs(t, err, &unsupported)
		require.Contains(t, err.Error(), "OrderCreated")
	})
}
