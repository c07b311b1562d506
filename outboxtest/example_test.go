package outboxtest_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
	"github.com/wmoutbox/wmoutbox/outboxtest"
)

// placeOrder is the code under test: it writes the OrderCreated event of
// an order in the order's transaction.
func placeOrder(ctx context.Context, store *sqlite.Store, writer *outbox.Writer[*sql.Tx], id string, total int) error {
	return store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// ... INSERT INTO orders ...
		e, err := outbox.MarshalJSON("OrderCreated", map[string]any{"id": id, "total": total})
		if err != nil {
			return err
		}
		e.ID = "event-of-" + id // the ids are ULIDs by default; fixed here for the output
		e.Topic, e.AggregateType, e.AggregateID = "orders", "Order", id
		_, err = writer.Write(ctx, tx, e)
		return err
	})
}

// exampleT stands in for the *testing.T of a test, which an Example has
// not: it prints what a failed assertion reports.
type exampleT struct {
	testing.TB // nil: the kit calls only the methods below
}

func (exampleT) Helper()                  {}
func (exampleT) Context() context.Context { return context.Background() }
func (exampleT) Fatalf(format string, args ...any) {
	fmt.Printf("FAIL: "+format+"\n", args...)
}

// A test checks that placeOrder wrote its event, by type, aggregate and
// part of the payload. A wrong expectation fails with the events that
// were written, and why each does not match.
func ExampleRequireWritten() {
	var t testing.TB = exampleT{} // in a test: t *testing.T
	ctx := context.Background()
	db, err := sqlite.Open(ctx, sqlite.Memory)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := sqlite.Migrate(ctx, db, sqlite.Config{}); err != nil {
		panic(err)
	}
	store, err := sqlite.NewStore(db, sqlite.Config{})
	if err != nil {
		panic(err)
	}
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		panic(err)
	}

	mark := outboxtest.Mark(t, store)
	if err := placeOrder(ctx, store, writer, "o-1", 1200); err != nil {
		panic(err)
	}
	e := mark.RequireWritten(t, outboxtest.Want{Type: "OrderCreated", AggregateID: "o-1", JSONContains: `{"total": 1200}`})
	fmt.Println(e.Type, e.Topic, e.Status)

	mark.RequireWritten(t, outboxtest.Want{Type: "OrderCreated", AggregateID: "o-2"})
	// Output:
	// OrderCreated orders NEW
	// FAIL: outboxtest: no event written since the mark matches {Type: "OrderCreated", AggregateID: "o-2"}; the events written since the mark:
	//   OrderCreated topic="orders" aggregate=Order/"o-1" NEW id=event-of-o-1 payload={"id":"o-1","total":1200}
	//     (aggregate id is "o-1", not "o-2")
}
