package kafkaforward

import (
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// DefaultClientID is the Kafka client id when Config sets none.
const DefaultClientID = "wmoutbox-forward"

// Config configures [NewPublisher]. The zero value is the recommended
// setup.
type Config struct {
	// Sarama replaces the producer configuration. Default [SaramaConfig].
	// Start from SaramaConfig and change what you need (TLS, SASL, Version,
	// compression) rather than from sarama.NewConfig, which is neither
	// durable nor idempotent. It is used as given, except ClientID below
	// and Producer.Return, which Publish needs on.
	Sarama *sarama.Config

	// ClientID, when set, overrides Sarama.ClientID. Default
	// [DefaultClientID] (with the default Sarama config).
	ClientID string

	// Logger receives a trace line for each record Kafka acknowledged.
	// Default: none.
	Logger watermill.LoggerAdapter
}

// SaramaConfig returns the producer configuration NewPublisher uses by
// default: durable and idempotent. Each setting says why.
func SaramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.ClientID = DefaultClientID

	// A write counts only once every in-sync replica has it: a leader
	// that dies right after acknowledging cannot lose an event the outbox
	// has already marked DONE.
	c.Producer.RequiredAcks = sarama.WaitForAll
	// Sarama's retries below must not write a record twice when only the
	// acknowledgement was lost: the broker deduplicates by producer id
	// and sequence number.
	c.Producer.Idempotent = true
	// Idempotence requires one request in flight per broker connection;
	// it also keeps a retried batch from overtaking the next one, which
	// per-aggregate ordering needs.
	c.Net.MaxOpenRequests = 1
	// Idempotent produce exists since Kafka 0.11; Sarama's default
	// protocol version (2.1) is above it, and pinning it here keeps an
	// older default from ever breaking idempotence.
	c.Version = sarama.V2_1_0_0
	// Publish waits for each record's answer (NewPublisher sets these
	// whatever the config says).
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	// Ride out a leader election (a few seconds) inside one Publish;
	// longer outages are the outbox's to retry, with backoff and
	// last_error, instead of a handler blocked for minutes.
	c.Producer.Retry.Max = 10
	c.Producer.Retry.Backoff = 250 * time.Millisecond
	c.Metadata.Retry.Max = 5
	c.Metadata.Retry.Backoff = 250 * time.Millisecond
	return c
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

// NewPublisher returns a publisher on brokers that produces with
// cfg.Sarama (default [SaramaConfig]) records as watermill-kafka's
// publisher writes them, keyed with [PartitionKey]. It connects at once:
// with no broker reachable it fails, wrapping Sarama's error
// (sarama.ErrOutOfBrokers). A configuration Sarama rejects fails with a
// sarama.ConfigurationError. When it fails it leaves nothing connected.
// Close the publisher when done; Publish and Close are safe for concurrent
// use.
func NewPublisher(brokers []string, cfg Config) (*Publisher, error) {
	if len(brokers) == 0 {
		return nil, fmt.Errorf("%w: kafkaforward: no brokers", outbox.ErrInvalidRequest)
	}
	sc := cfg.Sarama
	if sc == nil {
		sc = SaramaConfig()
	}
	copied := *sc
	if cfg.ClientID != "" {
		copied.ClientID = cfg.ClientID
	}
	// Publish waits for each record's answer: without them it could not
	// know whether the write landed.
	copied.Producer.Return.Successes = true
	copied.Producer.Return.Errors = true
	logger := cfg.Logger
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	// The client is ours, not the producer's: sarama.NewAsyncProducer
	// leaves the client it made connected when the producer then fails
	// (an idempotent producer refused its producer id), and the broker
	// connections and goroutines would outlive the error.
	client, err := sarama.NewClient(brokers, &copied)
	if err != nil {
		return nil, fmt.Errorf("kafkaforward: %w", err)
	}
	producer, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("kafkaforward: create producer: %w", err)
	}
	return newPublisher(client, producer, logger), nil
}
