package watermilladapter

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// benchMessage is the benchmarks' event as a publisher receives it:
// ≈300-byte JSON payload, event and aggregate metadata, a trace header.
func benchMessage() *message.Message {
	msg := message.NewMessage("6f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60", []byte(`{"orderId":"9f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60",`+
		`"customerId":"c-1029384756","items":[{"sku":"SKU-000123","qty":2,"price":"19.99"},{"sku":"SKU-004567","qty":1,`+
		`"price":"149.00"}],"currency":"EUR","total":"188.98","shipping":{"method":"express","country":"DE"},`+
		`"createdAt":"2026-11-22T05:00:00Z"}`))
	msg.Metadata.Set(MetadataEventType, "OrderCreated")
	msg.Metadata.Set(MetadataAggregateType, "Order")
	msg.Metadata.Set(MetadataAggregateID, "9f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60")
	msg.Metadata.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	return msg
}

// BenchmarkEnvelope is the CPU an event costs outside the database: on
// the write side, message to validated envelope to stored headers; on the
// read side, stored headers to the message a handler receives.
func BenchmarkEnvelope(b *testing.B) {
	now := time.Now()
	b.Run("write", func(b *testing.B) {
		msg := benchMessage()
		b.ReportAllocs()
		for b.Loop() {
			e, err := toEnvelope("orders", msg)
			if err != nil {
				b.Fatal(err)
			}
			prepared, err := outbox.Prepare([]outbox.Envelope{e}, now)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := outbox.EncodeHeaders(prepared[0].Headers); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		e, err := toEnvelope("orders", benchMessage())
		if err != nil {
			b.Fatal(err)
		}
		prepared, err := outbox.Prepare([]outbox.Envelope{e}, now)
		if err != nil {
			b.Fatal(err)
		}
		stored, err := outbox.EncodeHeaders(prepared[0].Headers)
		if err != nil {
			b.Fatal(err)
		}
		event := outbox.Event{Envelope: prepared[0]}
		b.ReportAllocs()
		for b.Loop() {
			if event.Headers, err = outbox.DecodeHeaders(stored); err != nil {
				b.Fatal(err)
			}
			toMessage(&event, "outbox")
		}
	})
}
