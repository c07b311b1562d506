package kafkaforward

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// Defaults of [Config] and [DefaultOptions].
const (
	// DefaultClientID is the Kafka client id when Config sets none.
	DefaultClientID = "wmoutbox-forward"
	// DefaultDeliveryTimeout is how long a record may wait for Kafka's
	// answer (kgo.RecordDeliveryTimeout), checked when franz-go is about
	// to send a request and when a request ends (answered, or after its
	// own timeout, about 20 s): long enough to ride out a leader election
	// inside one Publish, short enough that a longer outage is the
	// outbox's to retry, with backoff and last_error.
	DefaultDeliveryTimeout = 10 * time.Second
	// DefaultConnectTimeout bounds NewPublisher's first exchange with the
	// cluster.
	DefaultConnectTimeout = 10 * time.Second
)

// Config configures [NewPublisher]. The zero value is the recommended
// setup.
type Config struct {
	// Options are franz-go client options, applied after [DefaultOptions]
	// and ClientID, so that they override them: TLS (kgo.DialTLSConfig),
	// SASL (kgo.SASL), compression (kgo.ProducerBatchCompression), record
	// size (kgo.ProducerBatchMaxBytes), how long a record may wait
	// (kgo.RecordDeliveryTimeout). kgo.DisableIdempotentWrite, and with it
	// acks below all, give up the durability the package documentation
	// describes. The seed brokers are NewPublisher's.
	Options []kgo.Opt

	// ClientID is the Kafka client id. Default [DefaultClientID].
	ClientID string

	// ConnectTimeout bounds NewPublisher's first exchange with the
	// cluster. Default [DefaultConnectTimeout].
	ConnectTimeout time.Duration

	// Logger receives a debug line for each record Kafka acknowledged.
	// Default slog.Default(), as every logger of this module (which
	// shows no debug lines unless configured to).
	Logger *slog.Logger
}

// DefaultOptions returns the franz-go producer options NewPublisher starts
// from: durable and idempotent. Each says why.
func DefaultOptions() []kgo.Opt {
	return []kgo.Opt{
		kgo.ClientID(DefaultClientID),
		// A write counts only once every in-sync replica has it: a leader
		// that dies right after acknowledging cannot lose an event the
		// outbox has already marked DONE. (franz-go's default, said here
		// because the durability rests on it; it also keeps the producer
		// idempotent, so that its own retries write no record twice and a
		// retried batch never overtakes the next one.)
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Each Publish waits for its record, so lingering would only add
		// latency: records published meanwhile go out in the requests
		// that follow.
		kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(DefaultDeliveryTimeout),
		// A record sent to a broker that never answers fails when its
		// request times out (about 20 s), instead of holding its Publish
		// until the broker comes back: the outbox retries it, and a record the
		// broker had written after all reaches Kafka twice, which
		// at-least-once delivery allows. franz-go then fails the
		// partition's later records with it, so none overtakes it.
		kgo.AllowIdempotentProduceCancellation(),
		// As the Java producer does: a broker that creates topics on first
		// use creates them for the outbox's records too.
		kgo.AllowAutoTopicCreation(),
	}
}

// PartitionKey is the record key of a forwarded message: its
// [watermilladapter.MetadataAggregateID], or its
// [watermilladapter.MetadataEventID] when it has no aggregate id, or its
// UUID when it carries neither (it did not come from an outbox
// subscriber). It has watermill-kafka's GeneratePartitionKey signature.
func PartitionKey(_ string, msg *message.Message) (string, error) {
	if id := msg.Metadata.Get(watermilladapter.MetadataAggregateID); id != "" {
		return id, nil
	}
	if id := msg.Metadata.Get(watermilladapter.MetadataEventID); id != "" {
		return id, nil
	}
	return msg.UUID, nil
}

// NewPublisher returns a publisher on brokers that produces, with
// [DefaultOptions] and cfg, the records watermill-kafka's publisher
// writes, keyed with [PartitionKey]. It connects at once and has the
// cluster give it its idempotent producer id: with no broker answering
// within cfg.ConnectTimeout, or a broker refusing the id (Kafka before 2.8
// without the IdempotentWrite ACL), it fails, wrapping franz-go's error.
// Options franz-go rejects fail with outbox.ErrInvalidRequest: a
// transactional id among them, which would fail every record produced
// outside a transaction. When it fails it leaves nothing
// connected. Close the publisher when done; Publish and Close are safe for
// concurrent use.
func NewPublisher(brokers []string, cfg Config) (*Publisher, error) {
	if len(brokers) == 0 {
		return nil, fmt.Errorf("%w: kafkaforward: no brokers", outbox.ErrInvalidRequest)
	}
	if cfg.ConnectTimeout < 0 {
		return nil, fmt.Errorf("%w: kafkaforward: negative ConnectTimeout %v", outbox.ErrInvalidRequest, cfg.ConnectTimeout)
	}
	opts := DefaultOptions()
	if cfg.ClientID != "" {
		opts = append(opts, kgo.ClientID(cfg.ClientID))
	}
	opts = append(opts, cfg.Options...)
	opts = append(opts, kgo.SeedBrokers(brokers...))
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: kafkaforward: %w", outbox.ErrInvalidRequest, err)
	}
	timeout := cfg.ConnectTimeout
	if timeout == 0 {
		timeout = DefaultConnectTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Ping answers for a producer that is not idempotent, whose id needs
	// no broker.
	if err := client.Ping(ctx); err != nil {
		client.Close()
		return nil, fmt.Errorf("kafkaforward: connect to %v: %w", brokers, err)
	}
	if _, _, err := client.ProducerID(ctx); err != nil {
		client.Close()
		return nil, fmt.Errorf("kafkaforward: producer id from %v: %w", brokers, err)
	}
	// franz-go validated it (at least 1) and keeps it as an int64.
	buffered := client.OptValue(kgo.MaxBufferedRecords).(int64)
	return &Publisher{client: client, logger: cmp.Or(cfg.Logger, slog.Default()), room: make(chan struct{}, buffered)}, nil
}
