package main

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.uber.org/goleak"

	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
	"github.com/wmoutbox/wmoutbox/outboxtest"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// The quickstart's command tested as a service's own tests would, with
// outboxtest: what it wrote, and that a relay delivers it. SQLite in
// memory and a handler in place of Kafka keep it fast.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// shop is the quickstart's store on a fresh SQLite database in memory,
// with a relay whose handler hands what it receives to delivered.
type shop struct {
	store     *sqlite.Store
	sub       *watermilladapter.Subscriber
	pub       *watermilladapter.Publisher[*sql.Tx]
	mu        sync.Mutex
	delivered []string // event ids
}

func newShop(t *testing.T) *shop {
	t.Helper()
	ctx := t.Context()
	db, err := sqlite.Open(ctx, sqlite.Memory)
	must(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store, err := sqliteShop(ctx, db)
	must(t, err)
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{})
	must(t, err)
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: sub})
	must(t, err)
	s := &shop{store: store, sub: sub, pub: pub}

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	must(t, err)
	router.AddMiddleware(outboxmw.RecordErrors)
	router.AddConsumerHandler("orders", outboxTopic, sub, func(msg *message.Message) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.delivered = append(s.delivered, msg.Metadata.Get(watermilladapter.MetadataEventID))
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- router.Run(context.Background()) }()
	t.Cleanup(func() {
		must(t, router.Close())
		must(t, <-done)
		must(t, sub.Close())
	})
	<-router.Running()
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestPlaceOrderWritesOrderCreated(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	mark := outboxtest.Mark(t, s.store)

	id, err := placeOrder(t.Context(), s.store, s.pub, insertOrderSQLite, order{ID: "order-0001", TotalCents: 1234})
	must(t, err)

	mark.RequireWritten(t, outboxtest.Want{
		ID: id, Type: "OrderCreated", Topic: outboxTopic, AggregateType: "Order", AggregateID: "order-0001",
		JSON: `{"totalCents": 1234, "orderId": "order-0001"}`,
	})
	outboxtest.WaitDrained(t, s.sub, 10*time.Second)
	e := outboxtest.RequireWritten(t, s.store, outboxtest.Want{ID: id})
	if e.Status != outbox.StatusDone {
		t.Errorf("event %s is %s once the relay drained, want DONE", id, e.Status)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.delivered) != 1 || s.delivered[0] != id {
		t.Errorf("delivered %v, want [%s]", s.delivered, id)
	}
}

// An order that cannot be created writes no event: the event rolls back
// with it.
func TestFailedOrderWritesNoEvent(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	o := order{ID: "order-0001", TotalCents: 1234}
	_, err := placeOrder(t.Context(), s.store, s.pub, insertOrderSQLite, o)
	must(t, err)
	mark := outboxtest.Mark(t, s.store)

	_, err = placeOrder(t.Context(), s.store, s.pub, insertOrderSQLite, o) // the same id again
	if err == nil {
		t.Fatal("a second order with the same id was created")
	}
	mark.RequireNotWritten(t, outboxtest.Want{Type: "OrderCreated"})

	fail := errors.New("payment declined")
	_, err = placeOrder(t.Context(), s.store, s.pub, func(context.Context, *sql.Tx, order) error { return fail }, order{ID: "order-0002"})
	if !errors.Is(err, fail) {
		t.Fatalf("placeOrder returned %v, want %v", err, fail)
	}
	mark.RequireNotWritten(t, outboxtest.Want{AggregateID: "order-0002"})
	outboxtest.WaitDrained(t, s.sub, 10*time.Second)
}
