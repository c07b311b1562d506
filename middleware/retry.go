package middleware

import (
	wmmw "github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// ShouldRetry is a ShouldRetry for Watermill's Retry middleware that
// leaves the outbox's error classes to the outbox: it refuses to retry in
// the handler an error marked outbox.Permanent (retrying cannot fix it;
// the event goes DEAD) or outbox.RetryAfter or outbox.FailRetryAfter
// (the handler asked to come back after a delay, which Retry's backoff
// would not honour; the event is deferred, or retried after the delay).
// Every other error is retried.
//
//	router.AddMiddleware(
//		outboxmw.RecordErrors,
//		middleware.Retry{MaxRetries: 3, InitialInterval: 100 * time.Millisecond,
//			ShouldRetry: outboxmw.ShouldRetry}.Middleware,
//	)
func ShouldRetry(p wmmw.RetryParams) bool {
	if outbox.IsPermanent(p.Err) {
		return false
	}
	_, deferred := outbox.RetryAfterDelay(p.Err)
	_, scheduled := outbox.FailRetryAfterDelay(p.Err)
	return !deferred && !scheduled
}
