package middleware

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Interceptor is the specification's EventInterceptor: cross-cutting hooks
// around each delivery (audit, timing, tenant checks). Either hook may be
// nil.
type Interceptor struct {
	// Before runs before the handler. An error fails the delivery like a
	// handler error (RETRY or DEAD), and the handler does not run.
	Before func(msg *message.Message) error
	// After runs after the handler, or after a failed Before, with the
	// outcome (nil on success). A panic in it is logged, never propagated.
	After func(msg *message.Message, err error)
}

// Intercept returns middleware running the Before hooks in the order
// given and the After hooks in reverse order. logger receives After
// panics; nil discards them.
func Intercept(logger watermill.LoggerAdapter, interceptors ...Interceptor) message.HandlerMiddleware {
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) (produced []*message.Message, err error) {
			for _, ic := range interceptors {
				if ic.Before == nil {
					continue
				}
				if err = ic.Before(msg); err != nil {
					err = fmt.Errorf("interceptor before dispatch: %w", err)
					break
				}
			}
			if err == nil {
				produced, err = h(msg)
			}
			for i := len(interceptors) - 1; i >= 0; i-- {
				if after := interceptors[i].After; after != nil {
					runAfter(logger, after, msg, err)
				}
			}
			return produced, err
		}
	}
}

func runAfter(logger watermill.LoggerAdapter, after func(*message.Message, error), msg *message.Message, err error) {
	defer func() {
		if r := recover(); r != nil {
			logger.Error("outbox interceptor panicked after dispatch", fmt.Errorf("panic: %v", r),
				watermill.LogFields{"message_uuid": msg.UUID})
		}
	}()
	after(msg, err)
}
