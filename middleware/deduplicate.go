package middleware

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/internal/nilcheck"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// DeduplicateConfig configures [Deduplicate].
type DeduplicateConfig struct {
	// Consumer names what the handler does ("billing.charge-order"):
	// events are deduplicated per consumer, so that two handlers of one
	// event each process it once. Required; at most
	// [outbox.MaxConsumerLen] characters.
	Consumer string
	// EventID returns the id a message is deduplicated by. Default: its
	// outbox event id (the metadata [watermilladapter.MetadataEventID],
	// which the outbox sets on every message it delivers and the
	// forwarders carry downstream as a header), else its UUID.
	EventID func(msg *message.Message) string
}

// Deduplicate returns middleware that gives a handler's effects once per
// event, whatever the deliveries: it runs the handler in a transaction of
// inbox's database, with the message's context carrying the transaction
// ([outbox.TxFromContext]), and records the event's id there with the
// handler's writes. An event whose id a committed transaction recorded
// already is acknowledged without running the handler. One delivered
// twice at once waits for the first delivery's transaction, and is
// skipped if that commits or processed if it rolls back. A handler error
// rolls everything back, the record included, and the event is delivered
// again.
//
// The handler's writes must go through the transaction, and so must the
// events it produces: publish them with the outbox's Publisher, whose
// messages given the handler's context are written in it. Messages the
// handler returns are published by the router after the commit; should
// that fail, the event delivered again is found processed, and they are
// not produced again.
//
// A message with no id to deduplicate by fails with a permanent error
// ([outbox.Permanent]): delivering it again cannot help. Records are kept
// until [outbox.Inbox.PurgeProcessed] deletes them.
func Deduplicate[Tx any](inbox outbox.Inbox[Tx], cfg DeduplicateConfig) (message.HandlerMiddleware, error) {
	if nilcheck.Is(inbox) {
		return nil, fmt.Errorf("%w: Deduplicate needs an inbox", outbox.ErrInvalidRequest)
	}
	if err := outbox.ValidateConsumer(cfg.Consumer); err != nil {
		return nil, fmt.Errorf("middleware: Deduplicate: %w", err)
	}
	eventID := cfg.EventID
	if eventID == nil {
		eventID = defaultEventID
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) (produced []*message.Message, err error) {
			id := eventID(msg)
			err = inbox.InTx(msg.Context(), func(ctx context.Context, tx Tx) error {
				first, err := inbox.MarkProcessed(ctx, tx, cfg.Consumer, id)
				if err != nil || !first {
					return err
				}
				delivered := msg.Context()
				msg.SetContext(ctx)
				defer msg.SetContext(delivered)
				produced, err = h(msg)
				return err
			})
			if errors.Is(err, outbox.ErrInvalidRequest) {
				return nil, outbox.Permanent(fmt.Errorf("middleware: Deduplicate: message %s: %w", msg.UUID, err))
			}
			return produced, err
		}
	}, nil
}

func defaultEventID(msg *message.Message) string {
	if id := msg.Metadata.Get(watermilladapter.MetadataEventID); id != "" {
		return id
	}
	return msg.UUID
}
