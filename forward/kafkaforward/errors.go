package kafkaforward

import "errors"

// ErrClosed is returned by [Publisher.Publish] after Close.
var ErrClosed = errors.New("kafkaforward: publisher closed")
