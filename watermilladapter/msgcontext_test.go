package watermilladapter

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Watermill's contract: a message's context ends when the message is
// acked or nacked, and when the subscriber gives up on it at Close.
func TestMessageContextEndsOnAckNackAndClose(t *testing.T) {
	sub, _, msgs := subscribeToEndlessBacklog(t, SubscriberConfig{BatchSize: 3, ColdQueueCapacity: 3, WorkerCount: 3,
		DrainTimeout: 50 * time.Millisecond})
	receive := func() *message.Message {
		select {
		case msg := <-msgs:
			if err := msg.Context().Err(); err != nil {
				t.Fatalf("message %s handed over with its context ended: %v", msg.UUID, err)
			}
			return msg
		case <-time.After(10 * time.Second):
			t.Fatal("no message")
			return nil
		}
	}
	ended := func(what string, msg *message.Message) {
		t.Helper()
		select {
		case <-msg.Context().Done():
			if msg.Context().Err() != context.Canceled {
				t.Fatalf("%s: context error %v, want context.Canceled", what, msg.Context().Err())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the message context did not end", what)
		}
	}

	acked, nacked, held := receive(), receive(), receive()
	acked.Ack()
	ended("ack", acked)
	nacked.Nack()
	ended("nack", nacked)

	if err := held.Context().Err(); err != nil {
		t.Fatalf("a message in its handler had its context ended: %v", err)
	}
	if err := sub.Close(); err != nil { // gives up on held after DrainTimeout
		t.Fatal(err)
	}
	ended("close", held)
}
