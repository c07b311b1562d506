// Package middleware holds Watermill handler middleware for outbox
// subscribers: error capture for last_error, interceptors around each
// delivery, and consumer-side deduplication ([Deduplicate]: a handler's
// effects once per event, recorded in its transaction). Import it under an
// alias beside Watermill's own middleware package:
//
//	import (
//		"github.com/ThreeDotsLabs/watermill/message/router/middleware"
//		outboxmw "github.com/wmoutbox/wmoutbox/middleware"
//	)
//
//	router.AddMiddleware(
//		outboxmw.RecordErrors,        // outermost: sees the final error
//		middleware.Recoverer,
//		outboxmw.Intercept(logger, audit, timing),
//	)
//
// Error classes come from package outbox: return outbox.Permanent(err) to
// make an event DEAD at once, outbox.RetryAfter(d, err) to have it
// delivered again after d without spending an attempt,
// outbox.FailRetryAfter(d, err) to spend the attempt and have it
// delivered again after d rather than the retry policy's delay (an HTTP
// 429 with Retry-After from a downstream). With Watermill's
// Retry middleware, set its ShouldRetry to [ShouldRetry], so that Retry
// does not retry those in the handler.
package middleware
