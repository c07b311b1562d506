package amqpforward

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// ErrUnroutable is returned by Publish when RabbitMQ routed a message to
// no queue: no queue is named after the topic. The broker kept nothing, so
// the outbox delivers the event again (RETRY, with this error in
// last_error) until the queue exists or the retry policy gives up (DEAD,
// to be replayed once it does).
var ErrUnroutable = errors.New("amqpforward: no queue took the message")

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("amqpforward: publisher closed")

// redialDelay is how long Publish fails with the last dial error before
// dialling again, so that a broker that is down is not dialled once per
// event.
const redialDelay = time.Second

// closeTimeout is how long Close waits for the broker to confirm that the
// connection is closed: a broker that stopped reading (a resource alarm)
// never does.
const closeTimeout = 2 * time.Second

// Publisher is a Watermill publisher to RabbitMQ made for forwarding: see
// the package documentation for what it sends and when Publish returns
// nil. It is safe for concurrent use; each Publish in flight has an AMQP
// channel of its own.
type Publisher struct {
	url       string
	where     string // the broker for errors, without credentials
	cfg       Config
	marshaler marshaler
	// slots holds a token for each Publish in flight, up to
	// Config.Channels.
	slots chan struct{}

	mu       sync.Mutex
	conn     *amqp091.Connection
	idle     []*confirmChannel
	closed   bool
	dialing  *dialing // the dial under way, nil when none is
	dialErr  error
	dialedAt time.Time
}

// dialing is a dial under way, which every Publish needing a connection
// waits for, each until its own context ends.
type dialing struct {
	done chan struct{}
	conn *amqp091.Connection // set before done is closed
	err  error
}

// Publish sends each message to the queue named topic and returns once
// the broker confirmed every one of them. It refuses, as outbox.Permanent,
// a message AMQP cannot carry, before sending anything; it returns
// ErrUnroutable when no queue took a message, and ErrClosed after Close.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if len(topic) > maxShortString {
		return outbox.Permanent(fmt.Errorf(
			"amqpforward: topic %.40q... is %d bytes, AMQP routing keys hold %d", topic, len(topic), maxShortString))
	}
	pubs := make([]amqp091.Publishing, len(msgs))
	for i, msg := range msgs {
		var err error
		if pubs[i], err = p.marshaler.Marshal(msg); err != nil {
			return err
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	c, err := p.acquire(msgs[0].Context())
	if err != nil {
		return err
	}
	if err := fitFrames(pubs, c.conn.Config.FrameSize); err != nil {
		p.release(c, nil)
		return err
	}
	for i, pub := range pubs {
		if err = c.publish(msgs[i].Context(), topic, pub); err != nil {
			break
		}
	}
	p.release(c, err)
	if err != nil {
		return fmt.Errorf("amqpforward: publish to queue %q on %s: %w", topic, p.where, err)
	}
	return nil
}

// frameEnvelope is what a frame adds to its payload (type, channel,
// size, end marker), and headerFixed what a content header frame's payload
// holds besides the properties (class, weight, body size, property flags).
const frameEnvelope, headerFixed = 8, 14

// fitFrames refuses, as outbox.Permanent, a message whose properties do not
// fit one frame of frameSize bytes (the connection's negotiated frame_max;
// 0 or less when there is none): AMQP cannot split them, amqp091-go sends
// them anyway, and RabbitMQ then closes the whole connection, failing every
// publish in flight on it, each time the event is retried.
func fitFrames(pubs []amqp091.Publishing, frameSize int) error {
	if frameSize <= 0 {
		return nil
	}
	for _, pub := range pubs {
		if n := headerFrameSize(pub); n > frameSize {
			return outbox.Permanent(fmt.Errorf(
				"amqpforward: the message's headers and properties take %d bytes, more than the connection's frame_max of %d that AMQP must carry them in",
				n, frameSize))
		}
	}
	return nil
}

// headerFrameSize is the size of the frame carrying pub's properties, or
// a little more: it counts the properties that are not set too. The
// marshaler writes headers as strings only.
func headerFrameSize(pub amqp091.Publishing) int {
	n := frameEnvelope + headerFixed
	for _, s := range []string{pub.ContentType, pub.ContentEncoding, pub.CorrelationId, pub.ReplyTo,
		pub.Expiration, pub.MessageId, pub.Type, pub.UserId, pub.AppId} {
		n += 1 + len(s) // short strings
	}
	n += 1 + 1 + 8 // delivery mode, priority, timestamp
	n += 4         // the header table's length
	for k, v := range pub.Headers {
		s, _ := v.(string)
		n += 1 + len(k) + 1 + 4 + len(s) // key, type, length, value
	}
	return n
}

// Close closes the connection. Publishes in flight then fail, and their
// events are delivered again.
func (p *Publisher) Close() error {
	p.mu.Lock()
	conn := p.conn
	p.closed, p.conn, p.idle = true, nil, nil
	p.mu.Unlock()
	if conn == nil {
		return nil
	}
	if err := conn.CloseDeadline(time.Now().Add(closeTimeout)); err != nil && !errors.Is(err, amqp091.ErrClosed) {
		return fmt.Errorf("amqpforward: close connection to %s: %w", p.where, err)
	}
	return nil
}

// acquire takes a slot and an open channel, waiting for a slot until ctx
// ends.
func (p *Publisher) acquire(ctx context.Context) (*confirmChannel, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("amqpforward: wait for a channel: %w", ctx.Err())
	}
	c, err := p.channel(ctx)
	if err != nil {
		<-p.slots
		return nil, err
	}
	return c, nil
}

// channel returns an idle channel of the current connection, or opens
// one.
func (p *Publisher) channel(ctx context.Context) (*confirmChannel, error) {
	conn, err := p.connection(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if c.conn == conn && !c.ch.IsClosed() {
			p.mu.Unlock()
			return c, nil
		}
	}
	p.mu.Unlock()
	c, err := openConfirmChannel(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("amqpforward: open channel on %s: %w", p.where, err)
	}
	return c, nil
}

// release gives back c's slot, and c for reuse when nothing about it is
// left pending: after an error other than ErrUnroutable a confirm or a
// return may still come on it, and would be taken for the next message's.
// The slot of a write that outlived its publish is given back when the
// write is over (the broker read it, or the connection closed), so that
// writes held by a broker that stopped reading stay within
// Config.Channels while the publishes after them wait for a slot, each
// until its message's context ends.
func (p *Publisher) release(c *confirmChannel, err error) {
	if c.writing != nil {
		go func() {
			<-c.writing
			_ = c.ch.Close()
			<-p.slots
		}()
		return
	}
	defer func() { <-p.slots }()
	p.mu.Lock()
	if (err == nil || errors.Is(err, ErrUnroutable)) && c.conn == p.conn && !p.closed {
		p.idle = append(p.idle, c)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	// Closing waits for the broker's answer, which a broker that stopped
	// reading never sends; the connection's end ends the wait.
	go func() { _ = c.ch.Close() }()
}

// connection returns the open connection, or waits until ctx ends for a
// dial, starting one when none is under way.
func (p *Publisher) connection(ctx context.Context) (*amqp091.Connection, error) {
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return nil, ErrClosed
	case p.conn != nil && !p.conn.IsClosed():
		conn := p.conn
		p.mu.Unlock()
		return conn, nil
	case p.dialing == nil && p.dialErr != nil && time.Since(p.dialedAt) < redialDelay:
		err := p.dialErr
		p.mu.Unlock()
		return nil, err
	}
	d := p.dialing
	if d == nil {
		d = &dialing{done: make(chan struct{})}
		p.dialing = d
		go p.dial(d)
	}
	p.mu.Unlock()
	select {
	case <-d.done:
		return d.conn, d.err
	case <-ctx.Done():
		return nil, fmt.Errorf("amqpforward: wait for the connection to %s: %w", p.where, ctx.Err())
	}
}

// dial connects for d and keeps the connection, unless the publisher was
// closed meanwhile.
func (p *Publisher) dial(d *dialing) {
	conn, err := p.connect()
	p.mu.Lock()
	p.dialing, p.dialErr, p.dialedAt = nil, err, time.Now()
	var late *amqp091.Connection // dialled for a publisher closed meanwhile
	if err == nil {
		if p.closed {
			late, conn, err = conn, nil, ErrClosed
		} else {
			p.conn = conn
		}
	}
	d.conn, d.err = conn, err
	p.mu.Unlock()
	close(d.done)
	if late != nil {
		// Not under the lock: a broker that stopped reading holds the
		// close for closeTimeout.
		_ = late.CloseDeadline(time.Now().Add(closeTimeout))
	}
}

// connect dials and declares Config.Queues, on every connection: a broker
// that lost them (a node replaced) gets them back.
func (p *Publisher) connect() (*amqp091.Connection, error) {
	var conn *amqp091.Connection
	var err error
	if p.cfg.Dial != nil {
		conn, err = amqp091.DialConfig(p.url, dialConfig(p.cfg.Dial))
	} else {
		conn, err = amqp091.Dial(p.url)
	}
	if err != nil {
		return nil, fmt.Errorf("amqpforward: connect to %s: %w", p.where, err)
	}
	if err := declareQueues(conn, p.cfg); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("amqpforward: %s: %w", p.where, err)
	}
	return conn, nil
}

func declareQueues(conn *amqp091.Connection, cfg Config) error {
	if len(cfg.Queues) == 0 {
		return nil
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	for _, q := range cfg.Queues {
		// The same declaration as watermill-amqp's durable queue
		// subscriber: durable, not auto-deleted, not exclusive.
		if _, err := ch.QueueDeclare(q, true, false, false, false, cfg.QueueArguments); err != nil {
			return fmt.Errorf("declare queue %q: %w", q, err)
		}
	}
	return nil
}

// confirmChannel is an AMQP channel in confirm mode that carries one
// message at a time, so that a returned message is the one in flight.
type confirmChannel struct {
	conn    *amqp091.Connection
	ch      *amqp091.Channel
	returns chan amqp091.Return
	closes  chan *amqp091.Error
	// writing, once a publish stopped waiting for its message's write,
	// closes when the write is over.
	writing <-chan struct{}
}

// openConfirmChannel opens a channel in confirm mode on conn, waiting
// until ctx ends: both are requests that a broker which stopped reading
// never answers. A channel that opens after ctx ended is closed.
func openConfirmChannel(ctx context.Context, conn *amqp091.Connection) (*confirmChannel, error) {
	type opened struct {
		c   *confirmChannel
		err error
	}
	done := make(chan opened, 1)
	go func() {
		c, err := openChannel(conn)
		done <- opened{c, err}
	}()
	select {
	case o := <-done:
		return o.c, o.err
	case <-ctx.Done():
		go func() {
			if o := <-done; o.c != nil {
				_ = o.c.ch.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

func openChannel(conn *amqp091.Connection) (*confirmChannel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("confirm mode: %w", err)
	}
	return &confirmChannel{
		conn:    conn,
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp091.Return, 1)),
		closes:  ch.NotifyClose(make(chan *amqp091.Error, 1)),
	}, nil
}

// publish sends pub to the queue named topic, mandatory, and waits for
// the broker's confirm.
func (c *confirmChannel) publish(ctx context.Context, topic string, pub amqp091.Publishing) error {
	confirm, err := c.send(ctx, topic, pub)
	if err != nil {
		return err
	}
	// amqp091-go closes returns when the channel closes: nil stops
	// receiving from it, and the confirm then says whether the message
	// was taken.
	var returned *amqp091.Return
	returns := c.returns
	receive := func(r amqp091.Return, ok bool) {
		if ok {
			returned = &r
		} else {
			returns = nil
		}
	}
	for waiting := true; waiting; {
		select {
		case r, ok := <-returns:
			receive(r, ok)
		case <-confirm.Done():
			waiting = false
		case <-ctx.Done():
			return fmt.Errorf("wait for the confirm: %w", ctx.Err())
		}
	}
	// The broker returns a message before it confirms it, and amqp091-go
	// hands the return to c.returns before it reads the confirm: a
	// return not received above is buffered now.
	select {
	case r, ok := <-returns:
		receive(r, ok)
	default:
	}
	if !confirm.Acked() {
		select {
		case e := <-c.closes:
			if e != nil {
				return fmt.Errorf("not confirmed, channel closed: %w", e)
			}
		default:
		}
		return errors.New("not confirmed by the broker")
	}
	if returned != nil {
		return fmt.Errorf("%w (%d %s): declare a queue named after the topic (Config.Queues)",
			ErrUnroutable, returned.ReplyCode, returned.ReplyText)
	}
	return nil
}

// send writes pub on c's channel, waiting until ctx ends. amqp091-go looks
// at ctx only before it writes, and a broker that stopped reading (a
// resource alarm) blocks the write once the socket's buffers are full,
// with the connection's write lock held, which every other publish then
// waits for: so the write runs on a goroutine of its own, and c.writing
// tells when a write that outlived its publish is over.
func (c *confirmChannel) send(ctx context.Context, topic string, pub amqp091.Publishing) (*amqp091.DeferredConfirmation, error) {
	written := make(chan struct{})
	var confirm *amqp091.DeferredConfirmation
	var err error
	go func() {
		defer close(written)
		confirm, err = c.ch.PublishWithDeferredConfirmWithContext(ctx, "", topic, true, false, pub)
	}()
	select {
	case <-written:
		return confirm, err
	case <-ctx.Done():
		c.writing = written
		return nil, fmt.Errorf("write the message: %w", ctx.Err())
	}
}

// dialConfig is a copy of cfg that amqp091-go may write to: it adds the
// client's capabilities to Properties, the URL's host to the TLS settings'
// ServerName and its defaults to Recovery, which would race with every
// other dial from the same Config.
func dialConfig(cfg *amqp091.Config) amqp091.Config {
	c := *cfg
	c.Properties = maps.Clone(c.Properties)
	if c.TLSClientConfig != nil {
		c.TLSClientConfig = c.TLSClientConfig.Clone()
	}
	if c.Recovery != nil {
		recovery := *c.Recovery
		c.Recovery = &recovery
	}
	return c
}
