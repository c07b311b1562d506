package middleware

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Interceptor is a pair of cross-cutting hooks around each delivery
// (audit, timing, tenant checks), the EventInterceptor of Java outbox
// frameworks. Either hook may be nil.
type Interceptor struct {
	// Before runs before the handler. An error fails the delivery like a
	// handler error (RETRY or DEAD), and the handler does not run.
	Before func(msg *message.Message) error
	// After runs after the handler, or after a failed Before, with the outcome
	// (nil on success); when the handler or a Before panics, with an error
	// matching [ErrPanicked] that gives the panic's value, before the panic
	// goes on (to Watermill's Recoverer, say). A panic in it is logged, never
	// propagated. The outcome is the handler's: a router with a publish topic
	// publishes the messages the handler produced after every middleware has
	// returned, so After sees nil when that publish then fails and nacks the
	// message (the event is retried, with [ErrNackedAfterSuccess] as its
	// last_error under [RecordErrors]).
	After func(msg *message.Message, err error)
}

// ErrPanicked is matched by the outcome the After hooks see when the
// handler or a Before hook panicked, and by the error [RecordErrors]
// records, for last_error, when a panic passes through it: "outbox:
// handler panicked: " and the panic's value.
var ErrPanicked = errors.New("outbox: handler panicked")

// onPanic calls record with an error matching [ErrPanicked] if the
// function deferring it did not get as far as setting returned: it
// panicked, and the panic goes on, or called runtime.Goexit. Deferred
// directly, it recovers the panic's value to describe it and panics again
// from within the deferred call, whose stack still holds the frames of the
// first panic: the Recoverer or the router that recovers it next sees
// them.
func onPanic(returned *bool, record func(error)) {
	if *returned {
		return
	}
	r := recover()
	if r == nil { // runtime.Goexit: nothing to describe, nothing to go on
		record(ErrPanicked)
		return
	}
	record(fmt.Errorf("%w: %v", ErrPanicked, r))
	panic(r)
}

// Intercept returns middleware running the Before hooks in the order
// given and the After hooks in reverse order. logger receives After
// panics, at error level; nil means slog.Default(), as every logger of
// this module.
func Intercept(logger *slog.Logger, interceptors ...Interceptor) message.HandlerMiddleware {
	if logger == nil {
		logger = slog.Default()
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) (produced []*message.Message, err error) {
			returned := false
			defer onPanic(&returned, func(err error) { runAfters(logger, interceptors, msg, err) })
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
			returned = true
			runAfters(logger, interceptors, msg, err)
			return produced, err
		}
	}
}

// runAfters runs the After hooks in reverse order.
func runAfters(logger *slog.Logger, interceptors []Interceptor, msg *message.Message, err error) {
	for i := len(interceptors) - 1; i >= 0; i-- {
		if after := interceptors[i].After; after != nil {
			runAfter(logger, after, msg, err)
		}
	}
}

func runAfter(logger *slog.Logger, after func(*message.Message, error), msg *message.Message, err error) {
	defer func() {
		if r := recover(); r != nil {
			logger.Error("outbox: interceptor panicked after dispatch",
				slog.String("message_uuid", msg.UUID), slog.Any("error", fmt.Errorf("panic: %v", r)))
		}
	}()
	after(msg, err)
}
