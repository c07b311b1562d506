package middleware

import (
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// RecordErrors attaches the handler's error to the message before the
// router nacks it, so that the outbox stores it in last_error and honours
// outbox.Permanent and outbox.RetryAfter. Without it a Nack is recorded as
// a plain failure with a generic last_error. Add it first, so it sees the
// error the other middleware let through.
func RecordErrors(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		produced, err := h(msg)
		if err != nil {
			watermilladapter.RecordError(msg, err)
		}
		return produced, err
	}
}
