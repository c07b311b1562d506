package watermilladapter

import (
	"context"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// Every wait of the relay is on its clock (SubscriberConfig.Clock), so
// that tests move time instead of waiting for it.

// withTimeout returns a context that ends when parent does or once d has
// passed on clock.
func withTimeout(parent context.Context, clock outbox.Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if _, system := clock.(outbox.SystemClock); system {
		return context.WithTimeout(parent, d)
	}
	ctx, cancel := context.WithCancel(parent)
	timer := clock.NewTimer(d)
	go func() {
		defer timer.Stop()
		select {
		case <-timer.C():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// boundedAfterStop returns a context that ends after timeout, or grace
// after stopped ends if that comes first: a statement sent while running
// is cut off once Close has waited grace for it.
func boundedAfterStop(stopped context.Context, clock outbox.Clock, timeout, grace time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := withTimeout(context.Background(), clock, timeout)
	unwatch := context.AfterFunc(stopped, func() {
		cutOff := clock.NewTimer(grace)
		defer cutOff.Stop()
		select {
		case <-cutOff.C():
			cancel()
		case <-ctx.Done():
		}
	})
	return ctx, func() {
		unwatch()
		cancel()
	}
}

// sleep waits d on clock, or until stop closes, and reports whether d
// passed.
func sleep(clock outbox.Clock, d time.Duration, stop <-chan struct{}) bool {
	timer := clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
		return true
	case <-stop:
		return false
	}
}
