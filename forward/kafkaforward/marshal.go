package kafkaforward

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// uuidHeaderKey is the record header that holds the message UUID:
// watermill-kafka's kafka.UUIDHeaderKey, which its subscriber reads. It is
// spelled out here so that importing this package does not build
// watermill-kafka, and with it Sarama, for one constant; the tests of the
// interop module (forward/kafkaforward/interop) check that the two agree.
const uuidHeaderKey = "_watermill_message_uuid"

// newRecord builds the record watermill-kafka's partitioning marshaler
// builds (the UUID header, one header per metadata entry, the payload as
// value, [PartitionKey] as key) in three allocations: the header values
// and the key share one buffer, and the header slice is sized once.
func newRecord(topic string, msg *message.Message) (*kgo.Record, error) {
	if err := validTopic(topic); err != nil {
		return nil, outbox.Permanent(err)
	}
	if _, reserved := msg.Metadata[uuidHeaderKey]; reserved {
		return nil, outbox.Permanent(fmt.Errorf("kafkaforward: metadata %s is reserved for the message UUID", uuidHeaderKey))
	}
	key, err := PartitionKey(topic, msg)
	if err != nil {
		return nil, err
	}
	size := len(msg.UUID) + len(key)
	for _, v := range msg.Metadata {
		size += len(v)
	}
	buf := make([]byte, 0, size)
	// cut appends s to buf and returns the appended bytes, capped so that
	// no later append can write into them.
	cut := func(s string) []byte {
		start := len(buf)
		buf = append(buf, s...)
		return buf[start:len(buf):len(buf)]
	}
	headers := make([]kgo.RecordHeader, 0, len(msg.Metadata)+1)
	headers = append(headers, kgo.RecordHeader{Key: uuidHeaderKey, Value: cut(msg.UUID)})
	for k, v := range msg.Metadata {
		headers = append(headers, kgo.RecordHeader{Key: k, Value: cut(v)})
	}
	return &kgo.Record{
		Topic:   topic,
		Key:     cut(key),
		Value:   msg.Payload,
		Headers: headers,
	}, nil
}

// maxTopicLength is the longest topic name Kafka accepts.
const maxTopicLength = 249

// validTopic applies Kafka's rule for topic names, which a broker would
// refuse however often it is asked: 1 to 249 of ASCII letters, digits,
// '.', '_' and '-', and not "." or "..".
func validTopic(topic string) error {
	if topic == "" || len(topic) > maxTopicLength || topic == "." || topic == ".." {
		return fmt.Errorf("kafkaforward: invalid topic %q: Kafka takes 1 to %d characters, and not \".\" or \"..\"", topic, maxTopicLength)
	}
	for _, c := range []byte(topic) {
		if !topicByte(c) {
			return fmt.Errorf("kafkaforward: invalid topic %q: Kafka takes only ASCII letters, digits, '.', '_' and '-'", topic)
		}
	}
	return nil
}

// topicByte reports whether Kafka takes c in a topic name.
func topicByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}
