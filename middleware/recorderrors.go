package middleware

import (
	"errors"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// RecordErrors attaches the handler's error to the message before the
// router nacks it, so that the outbox stores it in last_error and honours
// outbox.Permanent, outbox.RetryAfter and outbox.FailRetryAfter. Without it a Nack is recorded as
// a plain failure with a generic last_error. Add it first, so it sees the
// error the other middleware let through.
//
// A panic passing through it (with no Watermill Recoverer inside it, the
// router recovers it and nacks) is recorded as [ErrPanicked] with the panic's
// value; the panic goes on, with the stack where it began, which the router
// logs. When the handler returns no error it records [ErrNackedAfterSuccess],
// which only a Nack that follows reads.
func RecordErrors(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) (produced []*message.Message, err error) {
		returned := false
		defer onPanic(&returned, func(err error) { watermilladapter.RecordError(msg, err) })
		produced, err = h(msg)
		returned = true
		if err != nil {
			watermilladapter.RecordError(msg, err)
		} else {
			// Replaces what an earlier try recorded (Watermill's Retry
			// outside this middleware), so that it does not decide a Nack
			// that follows a success.
			watermilladapter.RecordError(msg, ErrNackedAfterSuccess)
		}
		return produced, err
	}
}

// ErrNackedAfterSuccess is what [RecordErrors] records when the handler
// returns no error: if the message is nacked all the same (the router
// could not publish the messages the handler produced, or a middleware
// outside RecordErrors failed it), last_error says so. An Ack ignores it.
var ErrNackedAfterSuccess = errors.New("outbox: nacked although the handler returned no error (publishing the messages it produced failed, or a middleware outside RecordErrors failed it)")
