package middleware

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/internal/nilcheck"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// DeduplicateConfig configures [Deduplicate].
type DeduplicateConfig struct {
	// Consumer names what the handler does ("billing.charge-order"):
	// events are deduplicated per consumer, so that two handlers of one
	// event each process it once. Default: the name of the router handler
	// the message came to, so that middleware added to a whole router
	// keeps a record per handler. Set, it serves one handler: a message
	// that comes to a second handler fails. At most 128 characters.
	Consumer string
	// EventID returns the id a message is deduplicated by. Default: its
	// outbox event id (the metadata [watermilladapter.MetadataEventID],
	// which the outbox sets on every message it delivers and the
	// forwarders carry downstream as a header), else its UUID.
	EventID func(msg *message.Message) string
}

// ErrMessagesReturned is the permanent error of a handler under
// [Deduplicate] that returned messages: the router would publish them
// after the transaction committed, and a failed publish would leave the
// event recorded as processed with its messages never sent. Publish them
// with the outbox's Publisher, in the handler's transaction, instead.
var ErrMessagesReturned = errors.New("middleware: Deduplicate: the handler returned messages to publish after the commit; publish them through the outbox in its transaction")

// Deduplicate returns middleware that gives a handler's effects once per
// event, whatever the deliveries: it runs the handler in a transaction of
// inbox's database, with the message's context carrying the transaction
// ([outbox.TxFromContext]), and records the event's id there with the
// handler's writes. An event whose id a committed transaction recorded
// already is acknowledged without running the handler. A handler error
// rolls everything back, the record included, and the event is delivered
// again.
//
// Two deliveries of one event at once take turns: the second waits for the
// first's transaction and is skipped if it commits. On PostgreSQL under
// REPEATABLE READ or SERIALIZABLE it fails with a serialization error
// instead, and is skipped when delivered again; on SQLite it waits at most
// the store's busy timeout, then fails and comes again.
//
// The handler's writes must go through the transaction, and so must the
// events it produces: publish them with the outbox's Publisher, whose
// messages given the handler's context are written in it. A handler that
// returns messages fails with [ErrMessagesReturned]. Add Deduplicate
// inside any middleware that retries the handler (after Watermill's Retry
// in AddMiddleware), so that each try has a transaction of its own.
//
// A message with no id to deduplicate by, or with no consumer to record it
// for, fails with a permanent error ([outbox.Permanent]): delivering it
// again cannot help. Records are kept until
// [outbox.Inbox.PurgeProcessed] deletes them.
func Deduplicate[Tx any](inbox outbox.Inbox[Tx], cfg DeduplicateConfig) (message.HandlerMiddleware, error) {
	if nilcheck.Is(inbox) {
		return nil, fmt.Errorf("%w: Deduplicate needs an inbox", outbox.ErrInvalidRequest)
	}
	if cfg.Consumer != "" {
		if reason := codec.CheckConsumer(cfg.Consumer); reason != "" {
			return nil, fmt.Errorf("%w: middleware: Deduplicate: %s", outbox.ErrInvalidRequest, reason)
		}
	}
	eventID := cfg.EventID
	if eventID == nil {
		eventID = defaultEventID
	}
	consumerOf := consumers{fixed: cfg.Consumer}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) (produced []*message.Message, err error) {
			consumer, err := consumerOf.of(msg)
			id := eventID(msg)
			if reason := codec.CheckRecord(consumer, id); err == nil && reason != "" {
				err = fmt.Errorf("%w: inbox: %s", outbox.ErrInvalidRequest, reason)
			}
			if err != nil {
				return nil, outbox.Permanent(fmt.Errorf("middleware: Deduplicate: message %s: %w", msg.UUID, err))
			}
			err = inbox.InTx(msg.Context(), func(ctx context.Context, tx Tx) error {
				first, err := inbox.MarkProcessed(ctx, tx, consumer, id)
				if err != nil || !first {
					return err
				}
				delivered := msg.Context()
				msg.SetContext(ctx)
				defer msg.SetContext(delivered)
				if produced, err = h(msg); err == nil && len(produced) > 0 {
					err = outbox.Permanent(ErrMessagesReturned)
				}
				return err
			})
			if err != nil {
				return nil, err
			}
			return nil, nil
		}
	}, nil
}

// consumers names the consumer of a message: the configured one, checked
// to serve one handler, or the handler's name.
type consumers struct {
	fixed string

	mu      sync.Mutex
	served  bool
	handler string // the handler the fixed consumer serves
}

func (c *consumers) of(msg *message.Message) (string, error) {
	handler := message.HandlerNameFromCtx(msg.Context())
	if c.fixed == "" {
		if handler == "" {
			return "", fmt.Errorf("%w: no consumer: set DeduplicateConfig.Consumer, or run the handler on a router", outbox.ErrInvalidRequest)
		}
		return handler, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.served {
		c.served, c.handler = true, handler
	}
	if handler != c.handler {
		// One record for two handlers would skip the second's events.
		return "", fmt.Errorf("%w: consumer %q serves handler %q, not %q: give each handler a Deduplicate of its own",
			outbox.ErrInvalidRequest, c.fixed, c.handler, handler)
	}
	return c.fixed, nil
}

func defaultEventID(msg *message.Message) string {
	if id := msg.Metadata.Get(watermilladapter.MetadataEventID); id != "" {
		return id
	}
	return msg.UUID
}
