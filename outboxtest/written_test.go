package outboxtest_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/internal/testmysql"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/outboxtest"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// Events written through a Writer in InTx, through a Writer in a
// transaction the caller owns, and through the Watermill Publisher are
// all found, by every field of Want.
func TestRequireWrittenFindsEveryWayOfWriting(t *testing.T) {
	t.Parallel()
	store, db := newSQLite(t, nil)
	write(t, store, orderCreated("o-1", 12))

	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	paid := outbox.NewBytes("OrderPaid", []byte("o-1 paid"))
	paid.AggregateType, paid.AggregateID, paid.TenantID = "Order", "o-1", "acme"
	tx, err := db.BeginTx(t.Context(), nil) // the caller's own transaction
	require.NoError(t, err)
	_, err = writer.Write(t.Context(), tx, paid)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())

	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{OwnTransaction: true})
	require.NoError(t, err)
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"sku":"A","left":0}`))
	require.NoError(t, pub.Publish("stock", msg))

	created := outboxtest.RequireWritten(t, store, outboxtest.Want{
		Type: "OrderCreated", Topic: "orders", AggregateType: "Order", AggregateID: "o-1",
		Headers: map[string]string{"source": "checkout"},
		JSON:    `{"lines":[{"qty":1,"sku":"A"}],"total":12.0,"id":"o-1"}`,
	})
	require.Equal(t, outbox.StatusNew, created.Status)
	outboxtest.RequireWritten(t, store, outboxtest.Want{Type: "OrderCreated", JSONContains: map[string]any{"id": "o-1", "lines": []any{map[string]any{"sku": "A"}}}})
	outboxtest.RequireWritten(t, store, outboxtest.Want{Type: "OrderPaid", TenantID: "acme", Payload: []byte("o-1 paid")})
	outboxtest.RequireWritten(t, store, outboxtest.Want{Topic: "stock", JSON: json.RawMessage(`{"left": 0, "sku": "A"}`)})
	outboxtest.RequireNotWritten(t, store, outboxtest.Want{Type: "OrderCancelled"})
	outboxtest.RequireNotWritten(t, store, outboxtest.Want{Type: "OrderCreated", AggregateID: "o-2"})
	require.Len(t, outboxtest.Written(t, store), 3)
}

// A Marker sees only what was written after it.
func TestMarkSeesOnlyLaterWrites(t *testing.T) {
	t.Parallel()
	store := newSQLiteStore(t, nil)
	write(t, store, orderCreated("o-1", 12))
	mark := outboxtest.Mark(t, store)
	require.Empty(t, mark.Written(t))
	mark.RequireNotWritten(t, outboxtest.Want{Type: "OrderCreated"})

	write(t, store, orderCreated("o-2", 5))
	require.Len(t, mark.Written(t), 1)
	e := mark.RequireWritten(t, outboxtest.Want{Type: "OrderCreated"})
	require.Equal(t, "o-2", e.AggregateID)
	mark.RequireNotWritten(t, outboxtest.Want{AggregateID: "o-1"})
}

// The failure messages say what was written, and why each event does not
// match.
func TestRequireWrittenFailuresListWhatWasWritten(t *testing.T) {
	t.Parallel()
	store := newSQLiteStore(t, nil)
	write(t, store, orderCreated("o-1", 12), orderCreated("o-3", 7))

	msg := failure(t, func(t testing.TB) {
		outboxtest.RequireWritten(t, store, outboxtest.Want{Type: "OrderCreated", AggregateID: "o-2"})
	})
	require.Contains(t, msg, `no event written matches {Type: "OrderCreated", AggregateID: "o-2"}`)
	require.Contains(t, msg, `OrderCreated topic="orders" aggregate=Order/"o-1" NEW`)
	require.Contains(t, msg, `payload={"id":"o-1","total":12,"lines":[{"sku":"A","qty":1}]}`)
	require.Contains(t, msg, `(aggregate id is "o-1", not "o-2")`)
	require.Contains(t, msg, `(aggregate id is "o-3", not "o-2")`)

	msg = failure(t, func(t testing.TB) {
		outboxtest.RequireWritten(t, store, outboxtest.Want{AggregateID: "o-1", JSONContains: `{"total": 13}`})
	})
	require.Contains(t, msg, "(JSON payload differs at $.total)")
	msg = failure(t, func(t testing.TB) {
		outboxtest.RequireWritten(t, store, outboxtest.Want{AggregateID: "o-1", Headers: map[string]string{"source": "admin"}})
	})
	require.Contains(t, msg, `(header "source" is "checkout", not "admin")`)

	msg = failure(t, func(t testing.TB) { outboxtest.RequireWritten(t, store, outboxtest.Want{Type: "OrderCreated"}) })
	require.Contains(t, msg, `2 events written match {Type: "OrderCreated"}, want exactly one`)
	require.Contains(t, msg, `aggregate=Order/"o-3"`)

	msg = failure(t, func(t testing.TB) { outboxtest.RequireNotWritten(t, store, outboxtest.Want{AggregateID: "o-3"}) })
	require.Contains(t, msg, `1 events written match {AggregateID: "o-3"}, want none`)
	require.Contains(t, msg, `aggregate=Order/"o-3"`)

	mark := outboxtest.Mark(t, store)
	msg = failure(t, func(t testing.TB) { mark.RequireWritten(t, outboxtest.Want{Type: "OrderCreated"}) })
	require.Contains(t, msg, "no event written since the mark matches")
	require.Contains(t, msg, "no event was written since the mark")

	msg = failure(t, func(t testing.TB) { outboxtest.RequireWritten(t, store, outboxtest.Want{JSON: `{"id":`}) })
	require.Contains(t, msg, "outboxtest: Want.JSON: not valid JSON")
}

// Want's matching of JSON and bytes, without a database.
func TestWantMatches(t *testing.T) {
	t.Parallel()
	event := func(payload string, isJSON bool) outbox.Event {
		e := outbox.NewBytes("T", []byte(payload))
		if isJSON {
			e = outbox.NewJSON("T", []byte(payload))
		}
		return outbox.Event{Envelope: e}
	}
	order := event(`{"id":"o-1","total":12,"tags":["a","b"],"customer":{"id":7,"name":"Ada"}}`, true)
	tests := []struct {
		name  string
		event outbox.Event
		want  outboxtest.Want
		match bool
	}{
		{"zero want", order, outboxtest.Want{}, true},
		{"same JSON, other order and spaces", order, outboxtest.Want{JSON: `{ "customer": {"name": "Ada", "id": 7}, "tags": ["a", "b"], "total": 12, "id": "o-1" }`}, true},
		{"numbers by value", order, outboxtest.Want{JSON: `{"id":"o-1","total":1.2e1,"tags":["a","b"],"customer":{"id":7.0,"name":"Ada"}}`}, true},
		{"JSON with a member less", order, outboxtest.Want{JSON: `{"id":"o-1"}`}, false},
		{"JSON as a Go value", order, outboxtest.Want{JSON: map[string]any{"id": "o-1", "total": 12, "tags": []string{"a", "b"}, "customer": map[string]any{"id": 7, "name": "Ada"}}}, true},
		{"JSON as a struct", event(`{"sku":"A","qty":2}`, true), outboxtest.Want{JSON: struct {
			SKU string `json:"sku"`
			Qty int    `json:"qty"`
		}{"A", 2}}, true},
		{"contains a member", order, outboxtest.Want{JSONContains: `{"id":"o-1"}`}, true},
		{"contains a nested member", order, outboxtest.Want{JSONContains: `{"customer":{"name":"Ada"}}`}, true},
		{"contains a wrong nested member", order, outboxtest.Want{JSONContains: `{"customer":{"name":"Bob"}}`}, false},
		{"contains a missing member", order, outboxtest.Want{JSONContains: `{"coupon":null}`}, false},
		{"contains arrays whole", order, outboxtest.Want{JSONContains: `{"tags":["a"]}`}, false},
		{"contains an object in place of a value", order, outboxtest.Want{JSONContains: `{"total":{"x":1}}`}, false},
		{"JSON written as bytes", event(`{"a":1}`, false), outboxtest.Want{JSON: `{"a":1}`}, true},
		{"JSON of a payload that is not", event(`plain text`, false), outboxtest.Want{JSON: `"plain text"`}, false},
		{"bytes", event("plain text", false), outboxtest.Want{Payload: []byte("plain text")}, true},
		{"bytes that differ", event("plain text", false), outboxtest.Want{Payload: []byte("plain")}, false},
		{"bytes are exact for JSON", order, outboxtest.Want{Payload: []byte(`{"id":"o-1"}`)}, false},
		{"type", order, outboxtest.Want{Type: "T"}, true},
		{"other type", order, outboxtest.Want{Type: "U"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.match, tt.want.Matches(tt.event))
		})
	}
	require.Panics(t, func() { outboxtest.Want{JSONContains: "{"}.Matches(order) })
}

// The kit reads the table through the public Store API: the same on
// every dialect.
func TestRequireWrittenOnPostgreSQL(t *testing.T) {
	t.Parallel()
	store, err := postgres.NewStore(testdb.New(t), postgres.Config{})
	require.NoError(t, err)
	checkDialect(t, store)
}

func TestRequireWrittenOnMySQL(t *testing.T) {
	t.Parallel()
	store, err := mysql.NewStore(testmysql.New(t), mysql.Config{})
	require.NoError(t, err)
	checkDialect(t, store)
}

func TestRequireWrittenOnSQLite(t *testing.T) {
	t.Parallel()
	checkDialect(t, newSQLiteStore(t, nil))
}

// checkDialect writes through the Writer and the Publisher in InTx, and
// checks what the kit finds, and what it says when it finds nothing.
func checkDialect[Tx any](t *testing.T, store *outbox.Store[Tx]) {
	t.Helper()
	write(t, store, orderCreated("o-1", 12))
	mark := outboxtest.Mark(t, store)
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{})
	require.NoError(t, err)
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, _ Tx) error {
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{"id": "o-2", "total": 5}`))
		msg.SetContext(ctx)
		return pub.Publish("orders", msg)
	}))
	mark.RequireWritten(t, outboxtest.Want{Topic: "orders", JSON: `{"total": 5, "id": "o-2"}`})
	mark.RequireNotWritten(t, outboxtest.Want{Type: "OrderCreated"})
	outboxtest.RequireWritten(t, store, outboxtest.Want{Type: "OrderCreated", AggregateID: "o-1", JSONContains: `{"total": 12}`})
	require.Len(t, outboxtest.Written(t, store), 2)

	msg := failure(t, func(t testing.TB) { mark.RequireWritten(t, outboxtest.Want{AggregateID: "o-2"}) })
	require.Contains(t, msg, `payload={"id":"o-2","total":5}`)
	require.Contains(t, msg, `(aggregate id is "", not "o-2")`)
}
