package middleware_test

import (
	"errors"
	"log/slog"
	"runtime"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	wmmw "github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/wmoutbox/wmoutbox/internal/logtest"
	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestInterceptOrderAndOutcome(t *testing.T) {
	t.Parallel()
	var trace []string
	ic := func(name string, failBefore bool) outboxmw.Interceptor {
		return outboxmw.Interceptor{
			Before: func(*message.Message) error {
				trace = append(trace, "before "+name)
				if failBefore {
					return errors.New(name + " refuses")
				}
				return nil
			},
			After: func(_ *message.Message, err error) {
				trace = append(trace, "after "+name+": "+errString(err))
			},
		}
	}
	handlerErr := errors.New("handler failed")
	h := outboxmw.Intercept(nil, ic("a", false), outboxmw.Interceptor{}, ic("b", false))(
		func(*message.Message) ([]*message.Message, error) {
			trace = append(trace, "handler")
			return nil, handlerErr
		})
	_, err := h(message.NewMessage(watermill.NewUUID(), nil))
	require.ErrorIs(t, err, handlerErr)
	require.Equal(t, []string{"before a", "before b", "handler", "after b: handler failed", "after a: handler failed"}, trace)

	trace = nil
	h = outboxmw.Intercept(nil, ic("a", true), ic("b", false))(func(*message.Message) ([]*message.Message, error) {
		trace = append(trace, "handler")
		return nil, nil
	})
	_, err = h(message.NewMessage(watermill.NewUUID(), nil))
	require.ErrorContains(t, err, "a refuses")
	require.Equal(t, []string{
		"before a",
		"after b: interceptor before dispatch: a refuses",
		"after a: interceptor before dispatch: a refuses",
	}, trace, "a failing before hook stops the chain and the handler")
}

func TestInterceptAfterPanicIsContained(t *testing.T) {
	t.Parallel()
	logger, captured := logtest.New()
	h := outboxmw.Intercept(logger, outboxmw.Interceptor{
		After: func(*message.Message, error) { panic("boom") },
	})(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	msg := message.NewMessage(watermill.NewUUID(), nil)
	_, err := h(msg)
	require.NoError(t, err)
	logged := captured.Find(slog.LevelError, "outbox: interceptor panicked after dispatch")
	require.Len(t, logged, 1)
	require.Equal(t, msg.UUID, logged[0].Attrs["message_uuid"])
	require.EqualError(t, logged[0].Attrs["error"].(error), "panic: boom")
}

func TestRecordErrorsPassesTheErrorOn(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	h := outboxmw.RecordErrors(func(*message.Message) ([]*message.Message, error) { return nil, boom })
	_, err := h(message.NewMessage(watermill.NewUUID(), nil))
	require.ErrorIs(t, err, boom, "a message not from an outbox subscriber is left alone")
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func panickingHandler(*message.Message) ([]*message.Message, error) { panic("handler bug") }

func panickingBeforeHook(*message.Message) error { panic("before hook bug") }

// A panic in the handler or in a Before hook still reaches every After
// hook, as a failed outcome that gives the panic's value, and then goes on
// to Watermill's Recoverer, which the documented order puts outside
// Intercept, with the stack where it began.
func TestInterceptAfterSeesPanics(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		panicky   outboxmw.Interceptor
		value, at string
	}{
		"handler":     {value: "handler bug", at: "panickingHandler"},
		"before hook": {panicky: outboxmw.Interceptor{Before: panickingBeforeHook}, value: "before hook bug", at: "panickingBeforeHook"},
	} {
		var outcomes []error
		after := func(_ *message.Message, err error) { outcomes = append(outcomes, err) }
		h := wmmw.Recoverer(outboxmw.Intercept(nil,
			outboxmw.Interceptor{After: after}, tc.panicky, outboxmw.Interceptor{After: after})(panickingHandler))
		_, err := h(message.NewMessage(watermill.NewUUID(), nil))
		var recovered wmmw.RecoveredPanicError
		require.ErrorAs(t, err, &recovered, name)
		require.Equal(t, tc.value, recovered.V, name)
		require.Contains(t, recovered.Stacktrace, tc.at, "%s: the stack where the panic began", name)
		require.Len(t, outcomes, 2, name)
		for _, outcome := range outcomes {
			require.ErrorIs(t, outcome, outboxmw.ErrPanicked, name)
			require.ErrorContains(t, outcome, tc.value, name)
		}
	}
}

// A handler that ends its goroutine (runtime.Goexit, as t.FailNow does)
// never returns: the After hooks still see a failed outcome.
func TestInterceptAfterSeesAGoexit(t *testing.T) {
	t.Parallel()
	var outcome error
	h := outboxmw.Intercept(nil, outboxmw.Interceptor{After: func(_ *message.Message, err error) { outcome = err }})(
		func(*message.Message) ([]*message.Message, error) { runtime.Goexit(); return nil, nil })
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = h(message.NewMessage(watermill.NewUUID(), nil))
	}()
	<-done
	require.ErrorIs(t, outcome, outboxmw.ErrPanicked)
}
