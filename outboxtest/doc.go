// Package outboxtest helps test code that writes outbox events, and
// relays that deliver them: assertions on what was written, a wait until
// a relay has settled every event, and a clock that tests move by hand.
// It works with every store (PostgreSQL, MySQL, SQLite: an
// [outbox.Store] of any transaction type) and takes the standard
// [testing.TB], with no assertion library.
//
// # What was written
//
// [RequireWritten] fails the test unless exactly one event of the store's
// table matches a [Want], and returns it; [RequireNotWritten] fails if one
// does. Events count once committed, however they were written: through
// an [outbox.Writer] or the Watermill Publisher, in [outbox.Store.InTx] or
// in a transaction the test's code began itself; whether a relay has
// delivered them yet or not. A failure lists the events that were
// written (type, topic, aggregate, status, id, an excerpt of the payload)
// and why each does not match:
//
//	outboxtest.RequireWritten(t, store, outboxtest.Want{
//		Type:         "OrderCreated",
//		AggregateID:  order.ID,
//		JSONContains: `{"total": 1200}`,
//	})
//
// To see only what one piece of code wrote, in a table that holds other
// events, take a [Mark] before it:
//
//	mark := outboxtest.Mark(t, store)
//	placeOrder(ctx, store, order)
//	mark.RequireWritten(t, outboxtest.Want{Type: "OrderCreated"})
//
// [Want.JSON] compares the payload as a JSON document (key order, spaces
// and the spelling of numbers do not matter), [Want.JSONContains] checks
// some of its members, [Want.Payload] compares bytes. [Written] returns
// every event, to check what a Want cannot say.
//
// The kit reads the table with [outbox.Store.QueryEvents]: a store
// configured to delete delivered events (DeleteDone) keeps none to find
// once a relay has delivered them. Keep the tables of tests small: each
// assertion reads the whole table.
//
// # Waiting for a relay
//
// [WaitDrained] waits until a relay (a *watermilladapter.Subscriber) is
// idle: no event of the topics it serves is due and without a recorded
// outcome. Events due later (a retry whose backoff runs, a DeliverAfter
// ahead) do not count, so a retry leaves the relay drained until the clock
// passes it. It fails the test with what is still unsettled after the
// timeout. See watermilladapter.Subscriber.WaitIdle for the details.
//
//	pub.Publish("orders", msg)                  // in the code under test
//	outboxtest.WaitDrained(t, sub, 5*time.Second)
//	// the handlers have run, and every outcome is recorded
//
// # Moving time
//
// [Clock] is an [outbox.Clock] that stands still until the test moves it.
// Give the same one to the store (the dialect's Config.Clock) and to the
// relay (watermilladapter.SubscriberConfig.Clock): backoff, delayed
// events, polls and leases then end when the test calls [Clock.Advance],
// not after real time:
//
//	clock := outboxtest.NewClock(time.Now())
//	store, _ := sqlite.NewStore(db, sqlite.Config{Clock: clock})
//	sub, _ := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{Clock: clock})
//	// a handler fails once ...
//	outboxtest.WaitDrained(t, sub, 5*time.Second) // the retry is not due yet
//	clock.Advance(time.Minute)                    // now it is
//	outboxtest.WaitDrained(t, sub, 5*time.Second) // and it was delivered
//
// On a clock that stands still, what waits on it waits for the test: a
// relay's poll (PollInterval) and, after a claim, the WakeCooldown before
// the next claim a wake-up brings. Events handed to the relay's hot path,
// and retries once due, need no move.
//
// Everything in the package is safe for concurrent use; the assertions
// call t.Fatalf, so call them from the test's goroutine.
package outboxtest
