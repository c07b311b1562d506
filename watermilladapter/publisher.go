package watermilladapter

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/internal/nilcheck"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// ErrPublisherClosed is returned by [Publisher.Publish] after Close.
var ErrPublisherClosed = errors.New("watermilladapter: publisher closed")

// PublisherConfig configures a [Publisher].
type PublisherConfig struct {
	// HotPath, when set, receives the events of each transaction begun by
	// the store's InTx right after it commits, so that they are delivered
	// without waiting for a poll: usually the [Subscriber] of this
	// process (see [outbox.WriterConfig]). An ordered Subscriber
	// (SubscriberConfig.Ordered) takes no events this way; it is woken at
	// the commit instead, told the events' aggregates, which its claim
	// names. Default: none; the subscribers' claims deliver.
	HotPath outbox.HotPath

	// Notify, when set, is told after each commit of the store's InTx the
	// topics of the events written without a hot path claim (no HotPath,
	// an ordered one, or none of its subscriptions serving the topic) and
	// due at once, so that relays in other processes claim them rather
	// than at their next poll: usually a postgres.Notifier's Notify, with
	// a postgres.Listener waking the other relays. It must not block.
	// Events HotPath takes and then hands back, its queue being full, are
	// announced by SubscriberConfig.Notify when they are released.
	// Default: none.
	Notify func(topics []string)

	// OwnTransaction lets Publish write a message whose context carries no
	// transaction in a short transaction of its own, begun on the store's
	// database (one per Publish call). Off by default: publishing outside
	// the business transaction loses the outbox guarantee, so it fails
	// with [outbox.ErrNoTransaction]. Watermill's universal test suite and
	// plain "publish later" uses turn it on.
	OwnTransaction bool

	// Headers, when set, adds entries to the headers of each message's
	// event from the message's context (msg.Context()), before it is
	// written: the W3C trace context, with package outboxotel's
	// Injector. A message published without an outbox_event_id is given
	// its event id first, so that the injector sees it. Default: none.
	Headers outbox.HeaderInjector

	// BeforeWrite are run on the events of each Publish, as
	// [outbox.WriterConfig]'s BeforeWrite, with the context of the first
	// message (the context Publish writes with), after Headers: they may
	// add headers (which come back as metadata) and refuse the write
	// with an error, which Publish returns wrapped; nothing is written
	// then. Default: none.
	BeforeWrite []func(ctx context.Context, events []outbox.Envelope) error

	// RejectDuplicateKeys makes a message whose [MetadataIdempotencyKey]
	// an event of its topic has fail Publish with outbox.ErrDuplicateKey,
	// writing none of the messages of the call and leaving the
	// transaction usable (see outbox.WriterConfig.RejectDuplicateKeys).
	// Default: false, such a message is skipped and the others written.
	RejectDuplicateKeys bool
}

// Publisher is a Watermill message.Publisher that writes each message as an
// outbox row in the caller's transaction. Tx is the store's transaction
// type (pgx.Tx for PostgreSQL).
//
// The transaction is found in the context of the published messages (put
// there by the store's InTx or [outbox.ContextWithTx]), or bound with
// [Publisher.WithTx]. All messages of one Publish call are written in one
// round trip; they must share a transaction (messages whose contexts carry
// different ones, or some one and some none, fail with
// outbox.ErrInvalidRequest, and nothing is written).
//
// The transaction must be on the database of the publisher's store: the
// publisher cannot tell, and writes in whatever transaction of type Tx it
// is given.
//
// Publish is safe for concurrent use, on different transactions: a
// transaction serves one statement at a time (pgx's is not safe for
// concurrent use). Close is idempotent and closes
// nothing it does not own: not the store's pool, not the hot-path
// subscriber.
type Publisher[Tx any] struct {
	store  *outbox.Store[Tx]
	writer *outbox.Writer[Tx]
	cfg    PublisherConfig
	bound  *Tx
	closed *atomic.Bool
}

var _ message.Publisher = (*Publisher[any])(nil)

// NewPublisher returns a publisher writing through store.
func NewPublisher[Tx any](store *outbox.Store[Tx], cfg PublisherConfig) (*Publisher[Tx], error) {
	if store == nil {
		return nil, fmt.Errorf("watermilladapter: new publisher: %w: no store", outbox.ErrInvalidRequest)
	}
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{HotPath: cfg.HotPath, Notify: cfg.Notify,
		BeforeWrite: cfg.BeforeWrite, RejectDuplicateKeys: cfg.RejectDuplicateKeys})
	if err != nil {
		return nil, err
	}
	if nilcheck.Is(cfg.Headers) {
		cfg.Headers = nil
	}
	return &Publisher[Tx]{store: store, writer: writer, cfg: cfg, closed: new(atomic.Bool)}, nil
}

// WithTx returns a publisher writing every message in tx, whatever the
// messages' contexts say. It shares p's state: closing either closes both.
func (p *Publisher[Tx]) WithTx(tx Tx) *Publisher[Tx] {
	bound := *p
	bound.bound = &tx
	return &bound
}

// Publish writes msgs as outbox rows on topic. The message UUIDs and
// metadata are kept; see the Metadata keys for the envelope fields. An
// empty topic or a nil message fails with outbox.ErrInvalidRequest, and
// nothing is written.
func (p *Publisher[Tx]) Publish(topic string, msgs ...*message.Message) error {
	if p.closed.Load() {
		return ErrPublisherClosed
	}
	if topic == "" {
		return fmt.Errorf("watermilladapter: publish: %w: no topic", outbox.ErrInvalidRequest)
	}
	if len(msgs) == 0 {
		return nil
	}
	events := make([]outbox.Envelope, len(msgs))
	for i, msg := range msgs {
		if msg == nil {
			return fmt.Errorf("watermilladapter: publish to %s: %w: message %d is nil", topic, outbox.ErrInvalidRequest, i)
		}
		e, err := toEnvelope(topic, msg)
		if err != nil {
			return fmt.Errorf("watermilladapter: publish message %s to %s: %w", msg.UUID, topic, err)
		}
		if p.cfg.Headers != nil {
			if e.ID == "" {
				e.ID = outbox.NewID()
			}
			p.cfg.Headers.InjectHeaders(msg.Context(), &e)
		}
		events[i] = e
	}
	ctx := msgs[0].Context()
	if p.bound != nil {
		return p.write(ctx, *p.bound, topic, msgs, events)
	}
	tx, ok := outbox.TxFromContext[Tx](ctx)
	for _, msg := range msgs[1:] {
		if other, has := outbox.TxFromContext[Tx](msg.Context()); has != ok || has && !nilcheck.Same(tx, other) {
			return fmt.Errorf("watermilladapter: publish to %s: %w: message %s is not in the transaction of message %s; publish the messages of each transaction apart",
				topic, outbox.ErrInvalidRequest, msg.UUID, msgs[0].UUID)
		}
	}
	if ok {
		return p.write(ctx, tx, topic, msgs, events)
	}
	if !p.cfg.OwnTransaction {
		return fmt.Errorf("watermilladapter: publish to %s: %w", topic, noTransaction[Tx](ctx))
	}
	return p.store.InTx(ctx, func(ctx context.Context, tx Tx) error {
		return p.write(ctx, tx, topic, msgs, events)
	})
}

// noTransaction says why ctx, a message context, gave no transaction of
// type Tx, and what to do: it matches [outbox.ErrNoTransaction].
func noTransaction[Tx any](ctx context.Context) error {
	if found := outbox.TxInContext(ctx); found != nil {
		return fmt.Errorf("%w: the store's transactions are %v; the message context carries %T",
			outbox.ErrNoTransaction, reflect.TypeFor[Tx](), found)
	}
	return fmt.Errorf("%w: the message context carries none; inside InTx, call msg.SetContext(ctx) with the context InTx gave "+
		"(or bind a transaction with WithTx, or set OwnTransaction)", outbox.ErrNoTransaction)
}

// write writes the events of msgs in tx; an invalid one's error names its
// message.
func (p *Publisher[Tx]) write(ctx context.Context, tx Tx, topic string, msgs []*message.Message, events []outbox.Envelope) error {
	_, err := p.writer.Write(ctx, tx, events...)
	var invalid *outbox.ValidationError
	if errors.As(err, &invalid) && invalid.Index < len(msgs) {
		return fmt.Errorf("watermilladapter: publish message %s to %s: %w", msgs[invalid.Index].UUID, topic, err)
	}
	return err
}

// Close makes further Publish calls fail. It closes nothing else.
func (p *Publisher[Tx]) Close() error {
	p.closed.Store(true)
	return nil
}
