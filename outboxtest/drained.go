package outboxtest

import (
	"context"
	"testing"
	"time"
)

// Relay is what [WaitDrained] waits on: a *watermilladapter.Subscriber.
type Relay interface {
	// WaitIdle returns nil once the relay has settled every event due,
	// or an error saying what was not when ctx ends.
	WaitIdle(ctx context.Context) error
}

// WaitDrained waits until relay is idle, and fails the test, saying what
// was still unsettled, when timeout passes first. Idle, as
// watermilladapter.Subscriber.WaitIdle defines it: no event of the topics
// the relay serves is due and without a recorded outcome. Events due
// later (a retry's backoff, a DeliverAfter) do not count: move the
// [Clock] past them, and wait again.
func WaitDrained(t testing.TB, relay Relay, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	if err := relay.WaitIdle(ctx); err != nil {
		t.Fatalf("outboxtest: relay not drained within %s: %v", timeout, err)
	}
}
