package forward

import "errors"

var (
	// ErrNoTopic is returned by the [Handler] when no downstream topic is
	// known for a message: the default Topic found no router subscribe
	// topic in the message context (the handler ran outside a router), or a
	// Topic function returned "". [ByAggregateType] returns it for a
	// message without an aggregate type. The event is retried like any
	// failure; fix the configuration, or return outbox.Permanent from a
	// Topic function to send such events to DEAD at once.
	ErrNoTopic = errors.New("forward: no downstream topic")

	// ErrPublisherClosed is returned by [LazyPublisher.Publish] after Close.
	ErrPublisherClosed = errors.New("forward: publisher closed")
)
