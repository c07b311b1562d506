package watermilladapter

import (
	"context"
	"errors"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// errNacked is the last_error of a Nack whose handler error nobody
// recorded.
var errNacked = errors.New("nacked (no handler error recorded: add the outbox error-capturing middleware)")

// RecordError attaches the handler's error to a message the [Subscriber]
// delivered, so that a following Nack stores it in last_error and
// classifies it: [outbox.Permanent] → DEAD at once, [outbox.RetryAfter] →
// deferred without spending an attempt, [outbox.FailRetryAfter] → RETRY
// after its delay or DEAD by the retry policy's count, anything else →
// RETRY or DEAD by the retry policy. Watermill's Nack carries no error, hence this; the
// middleware package's error-capturing middleware calls it for you. It
// reports false for messages that did not come from a Subscriber.
func RecordError(msg *message.Message, err error) bool {
	slot, ok := msg.Context().Value(errorSlotKey{}).(*errorSlot)
	if !ok {
		return false
	}
	slot.set(err)
	return true
}

type errorSlotKey struct{}

// messageContext is the context of a delivered message: ctx, which ends
// with the message's Ack or Nack, and the slot for its handler's error,
// in one allocation instead of a value context and a slot. It passes
// every other key on to ctx, so a context derived from it finds ctx's
// cancellation and registers with it, as with ctx itself, instead of
// waiting for it on a goroutine of its own.
type messageContext struct {
	context.Context
	slot errorSlot
	// policy and attempt decide the outcome of a Nack, for [Outcome].
	policy  outbox.RetryPolicy
	attempt int
}

// outcomeKey finds the messageContext, for [Outcome].
type outcomeKey struct{}

func (c *messageContext) Value(key any) any {
	switch key.(type) {
	case errorSlotKey:
		return &c.slot
	case outcomeKey:
		return c
	}
	return c.Context.Value(key)
}

type errorSlot struct {
	mu  sync.Mutex
	err error
}

func (s *errorSlot) set(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

func (s *errorSlot) errOr(fallback error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		return fallback
	}
	return s.err
}
