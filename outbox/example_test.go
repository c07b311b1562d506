package outbox_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// Prepare validates envelopes and fills in the defaults the writer stores.
func ExamplePrepare() {
	const OrderCreated outbox.EventType = "OrderCreated"
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

	order, err := outbox.MarshalJSON(OrderCreated, map[string]int{"order": 42})
	if err != nil {
		panic(err)
	}
	prepared, err := outbox.Prepare([]outbox.Envelope{order}, now)
	if err != nil {
		panic(err)
	}
	e := prepared[0]
	fmt.Println("id length:", len(e.ID))
	fmt.Println("topic:", e.Topic)
	fmt.Println("aggregate type:", e.AggregateType)
	fmt.Println("occurred at:", e.OccurredAt.Format(time.RFC3339))
	fmt.Println("payload:", string(e.Payload()), "JSON:", e.IsJSON())

	_, err = outbox.Prepare([]outbox.Envelope{order, {Type: OrderCreated}}, now)
	fmt.Println(err)
	var verr *outbox.ValidationError
	if errors.As(err, &verr) {
		fmt.Println("index:", verr.Index, "field:", verr.Field, "invalid envelope:", errors.Is(err, outbox.ErrInvalidEnvelope))
	}
	// Output:
	// id length: 26
	// topic: OrderCreated
	// aggregate type: __GLOBAL__
	// occurred at: 2025-01-02T03:04:05Z
	// payload: {"order":42} JSON: true
	// outbox: invalid envelope 1: Payload: set one of PayloadJSON and PayloadBytes
	// index: 1 field: Payload invalid envelope: true
}

// The zero Backoff is the specification's policy; the order service's
// schedule is a few fields away. NoJitter makes the delays predictable.
func ExampleBackoff() {
	policies := []struct {
		name   string
		policy outbox.RetryPolicy
	}{
		{"default", outbox.Backoff{NoJitter: true}},
		{"order service", outbox.Backoff{Base: 100 * time.Millisecond, MaxAttempts: 5, NoJitter: true}},
	}
	for _, p := range policies {
		fmt.Print(p.name, ":")
		for attempts := 1; ; attempts++ {
			delay, ok := p.policy.NextRetry(attempts)
			if !ok {
				fmt.Printf(" DEAD after %d failures\n", attempts)
				break
			}
			fmt.Print(" ", delay)
		}
	}
	// Output:
	// default: 200ms 400ms 800ms 1.6s 3.2s 6.4s 12.8s 25.6s 51.2s DEAD after 10 failures
	// order service: 100ms 200ms 400ms 800ms DEAD after 5 failures
}
