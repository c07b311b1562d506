package amqpforward

import (
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// Config configures [NewPublisher] and [WatermillConfig]. The zero value
// declares no queue, dials with amqp091-go's defaults and publishes on up
// to 64 channels.
type Config struct {
	// Queues are the downstream topics, declared as durable queues when
	// the publisher connects (an existing queue is left as it is if its
	// arguments match). See the package documentation for why they must
	// exist. Default: none.
	Queues []string

	// QueueArguments are the arguments of the declared queues, and of the
	// queues a Subscriber built from [WatermillConfig] declares: for
	// example {"x-queue-type": "quorum"}. They must match those of queues
	// that already exist, or RabbitMQ refuses the declaration
	// (PRECONDITION_FAILED). Default: none (a classic queue).
	QueueArguments amqp091.Table

	// Dial configures the connection: heartbeat, TLS, virtual host,
	// connection name. Default: amqp091-go's defaults and the URL's.
	// Recovery must be nil: the publisher dials again by itself after a
	// lost connection, and amqp091-go's own recovery would keep the old
	// connection alive beside the new one.
	Dial *amqp091.Config

	// Channels is the most publishes in flight at once, each on an AMQP
	// channel of its own; more wait for one. Give it at least the
	// relay's WorkerCount. Default: 64.
	Channels int
}

const defaultChannels = 64

// WatermillConfig returns a watermill-amqp configuration matching what
// the Publisher sends: amqp.NewDurableQueueConfig with publisher confirms
// on, the Publisher's marshaler (persistent messages with the properties
// described in the package documentation), and cfg's dial settings and
// queue arguments. Build a watermill-amqp Subscriber from it to consume
// what the forwarder sends.
func WatermillConfig(url string, cfg Config) amqp.Config {
	c := amqp.NewDurableQueueConfig(url)
	if cfg.Dial != nil {
		dial := dialConfig(cfg.Dial)
		c.Connection.AmqpConfig = &dial
	}
	c.Queue.Arguments = cfg.QueueArguments
	c.Publish.ConfirmDelivery = true
	c.Marshaler = newMarshaler()
	return c
}

// newMarshaler is watermill-amqp's DefaultMarshaler with the properties
// set and the broker's headers read as text, refusing what AMQP cannot
// carry.
func newMarshaler() marshaler {
	// Persistent delivery mode is DefaultMarshaler's default; said here
	// so that nobody turns it off by accident.
	return marshaler{amqp.DefaultMarshaler{
		NotPersistentDeliveryMode: false,
		PostprocessPublishing:     setProperties,
		PreprocessDelivery:        stringHeaders,
	}}
}

// maxShortString is the most bytes of an AMQP short string: a header key,
// the Type property. The outbox counts characters, so a valid event type
// can be longer.
const maxShortString = 255

// marshaler is watermill-amqp's DefaultMarshaler, refusing what it would
// lose or what AMQP cannot carry, as permanent errors: the event goes DEAD
// with the reason instead of being retried in vain. (amqp091-go fails an
// over-long short string by closing the whole connection, failing every
// publish in flight.)
type marshaler struct{ amqp.DefaultMarshaler }

func (m marshaler) Marshal(msg *message.Message) (amqp091.Publishing, error) {
	if _, reserved := msg.Metadata[amqp.DefaultMessageUUIDHeaderKey]; reserved {
		return amqp091.Publishing{}, outbox.Permanent(fmt.Errorf(
			"amqpforward: metadata %s is reserved for the message UUID", amqp.DefaultMessageUUIDHeaderKey))
	}
	for _, k := range []string{"CC", "BCC"} {
		if _, routing := msg.Metadata[k]; routing {
			return amqp091.Publishing{}, outbox.Permanent(fmt.Errorf(
				"amqpforward: metadata %s is read by RabbitMQ as a list of queues to copy the message to (sender-selected distribution), which a string header cannot be", k))
		}
	}
	for k := range msg.Metadata {
		if len(k) > maxShortString {
			return amqp091.Publishing{}, outbox.Permanent(fmt.Errorf(
				"amqpforward: metadata key %.40q... is %d bytes, AMQP header keys hold %d", k, len(k), maxShortString))
		}
	}
	if n := len(msg.Metadata.Get(watermilladapter.MetadataEventType)); n > maxShortString {
		return amqp091.Publishing{}, outbox.Permanent(fmt.Errorf(
			"amqpforward: event type is %d bytes, the AMQP type property holds %d", n, maxShortString))
	}
	pub, err := m.DefaultMarshaler.Marshal(msg)
	if err == nil && len(pub.MessageId) > maxShortString {
		// Only a message that is not an outbox event's: its UUID stands in.
		return amqp091.Publishing{}, outbox.Permanent(fmt.Errorf(
			"amqpforward: message id is %d bytes, the AMQP message-id property holds %d", len(pub.MessageId), maxShortString))
	}
	return pub, err
}

// stringHeaders turns the headers that are not strings into strings: the
// broker adds some (a quorum queue's x-delivery-count, x-death after
// dead-lettering), and DefaultMarshaler refuses a message with any, so a
// consumer could never read such a message again.
func stringHeaders(d amqp091.Delivery) amqp091.Delivery {
	for k, v := range d.Headers {
		if _, ok := v.(string); !ok {
			d.Headers[k] = fmt.Sprint(v)
		}
	}
	return d
}

// setProperties copies the outbox envelope into the AMQP properties that
// AMQP consumers and tools read without looking at headers.
func setProperties(p amqp091.Publishing) amqp091.Publishing {
	header := func(k string) string { s, _ := p.Headers[k].(string); return s }
	p.MessageId = header(watermilladapter.MetadataEventID)
	if p.MessageId == "" {
		p.MessageId = header(amqp.DefaultMessageUUIDHeaderKey)
	}
	p.Type = header(watermilladapter.MetadataEventType)
	if t, err := time.Parse(time.RFC3339Nano, header(watermilladapter.MetadataOccurredAt)); err == nil {
		p.Timestamp = t
	}
	return p
}

// NewPublisher connects to the broker at url, declares cfg.Queues, and
// returns the publisher. It fails with ErrInvalidRequest for an invalid
// URL or Config, with the dial error wrapped when the broker cannot be
// reached (errors.Is(err, syscall.ECONNREFUSED) when nothing listens), and
// with the broker's error when a queue cannot be declared. Errors name the
// broker by host, port and virtual host, never with the URL's
// credentials. Close the publisher when done.
func NewPublisher(url string, cfg Config) (*Publisher, error) {
	uri, err := amqp091.ParseURI(url)
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err // a url.Error quotes the whole URL, password included
		}
		return nil, fmt.Errorf("%w: amqpforward: broker URL (not shown, it may hold a password): %w; "+
			"percent-encode reserved characters of the user name and password", outbox.ErrInvalidRequest, err)
	}
	if cfg.Channels < 0 {
		return nil, fmt.Errorf("%w: amqpforward: Channels is %d, want 0 (the default, %d) or more",
			outbox.ErrInvalidRequest, cfg.Channels, defaultChannels)
	}
	if cfg.Channels == 0 {
		cfg.Channels = defaultChannels
	}
	if cfg.Dial != nil && cfg.Dial.Recovery != nil {
		return nil, fmt.Errorf("%w: amqpforward: Dial.Recovery is set; the publisher dials again by itself after a lost connection",
			outbox.ErrInvalidRequest)
	}
	where := net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
	if uri.Vhost != "/" {
		where += " vhost " + strconv.Quote(uri.Vhost)
	}
	p := &Publisher{
		url:       url,
		where:     where,
		cfg:       cfg,
		marshaler: newMarshaler(),
		slots:     make(chan struct{}, cfg.Channels),
	}
	if _, err := p.connection(context.Background()); err != nil {
		return nil, err
	}
	return p, nil
}
