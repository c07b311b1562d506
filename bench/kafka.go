package main

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/wmoutbox/wmoutbox/forward/kafkaforward"
)

// toKafka is a downstream for oursDrain: kafkaforward's durable producer
// on an in-process Kafka-protocol broker (kfake). A message counts as
// delivered when the broker has acknowledged it.
func toKafka(context.Context) func(recv func(*message.Message)) (message.Publisher, func() error, error) {
	return func(recv func(*message.Message)) (message.Publisher, func() error, error) {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
		if err != nil {
			return nil, nil, fmt.Errorf("kfake: %w", err)
		}
		pub, err := kafkaforward.NewPublisher(cluster.ListenAddrs(), kafkaforward.Config{})
		if err != nil {
			cluster.Close()
			return nil, nil, err
		}
		closeAll := func() error {
			err := pub.Close()
			cluster.Close()
			return err
		}
		return acknowledged{pub, recv}, closeAll, nil
	}
}

// acknowledged reports each message its publisher has published.
type acknowledged struct {
	message.Publisher
	recv func(*message.Message)
}

func (a acknowledged) Publish(topic string, msgs ...*message.Message) error {
	if err := a.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	for _, m := range msgs {
		a.recv(m)
	}
	return nil
}

// Close leaves the publisher to its owner.
func (a acknowledged) Close() error { return nil }
