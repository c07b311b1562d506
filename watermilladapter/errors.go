package watermilladapter

import (
	"errors"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
)

// errNacked is the last_error of a Nack whose handler error nobody
// recorded.
var errNacked = errors.New("nacked (no handler error recorded: add the outbox error-capturing middleware)")

// RecordError attaches the handler's error to a message the [Subscriber]
// delivered, so that a following Nack stores it in last_error and
// classifies it: [outbox.Permanent] → DEAD at once, [outbox.RetryAfter] →
// deferred without spending an attempt, anything else → RETRY or DEAD by
// the retry policy. Watermill's Nack carries no error, hence this; the
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
