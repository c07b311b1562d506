package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
)

// The sink every relay in the program delivers to: a Watermill GoChannel
// whose Publish blocks until the subscriber acks, as a broker publish
// waits for the broker's confirmation before the relay marks the event
// done. A tally on the subscriber side counts deliveries by event number.

const (
	// keySeq is the metadata key carrying the event number, which matches
	// a delivery to the event (and commit) it came from.
	keySeq = "bench_seq"

	// A run gives up when its events have not all arrived within
	// deliveryTimeout plus deliveryTimePerEvent each: far slower than any
	// configuration measured here.
	deliveryTimeout      = 2 * time.Minute
	deliveryTimePerEvent = time.Millisecond
)

// sink is a GoChannel with one subscriber calling recv, then Ack, for
// every message published on topic.
type sink struct {
	pub  *gochannel.GoChannel
	done sync.WaitGroup
}

func startSink(ctx context.Context, topic string, recv func(*message.Message)) (*sink, error) {
	s := &sink{pub: gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, nil)}
	msgs, err := s.pub.Subscribe(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("subscribe sink: %w", err)
	}
	s.done.Go(func() {
		for msg := range msgs {
			recv(msg)
			msg.Ack()
		}
	})
	return s, nil
}

func (s *sink) close() error {
	err := s.pub.Close()
	s.done.Wait()
	return err
}

// toCounter is a downstream that hands each message to recv and returns at
// once: a broker that costs nothing, which leaves the relay's own cost.
func toCounter(recv func(*message.Message)) (message.Publisher, func() error, error) {
	return counter{recv: recv}, func() error { return nil }, nil
}

type counter struct{ recv func(*message.Message) }

func (c counter) Publish(_ string, msgs ...*message.Message) error {
	for _, msg := range msgs {
		c.recv(msg)
	}
	return nil
}

func (counter) Close() error { return nil }

// tally counts deliveries by event sequence number.
type tally struct {
	mu       sync.Mutex
	seen     []bool
	at       []time.Time // first delivery of each event, for latencies only
	distinct int
	dups     int
	stray    int // messages that are none of ours
	done     chan struct{}

	// With checkOrder: the backlog's shape, and for each aggregate one
	// more than the number of its latest event delivered (0: none yet).
	shape    shape
	latest   []int
	disorder int // first deliveries that came after a later event of their aggregate
}

// newTally counts deliveries of n events. It keeps one byte per event: the
// memory scenario's relay process, whose peak RSS is measured, holds one.
func newTally(n int) *tally {
	t := &tally{seen: make([]bool, n), done: make(chan struct{})}
	if n == 0 {
		close(t.done)
	}
	return t
}

// newLatencyTally also keeps when each event was first delivered.
func newLatencyTally(n int) *tally {
	t := newTally(n)
	t.at = make([]time.Time, n)
	return t
}

// checkOrder makes t check that the events of each aggregate, as
// writer.fill writes them in shape s, reach it in write order: an event's first delivery after that of a later event of its
// aggregate counts as out of order, and check fails. A repeated delivery
// of an event already delivered is a duplicate, not out of order.
func (t *tally) checkOrder(s shape) {
	t.shape = s
	t.latest = make([]int, s.aggregates(len(t.seen)))
}

func (t *tally) recv(msg *message.Message) {
	now := time.Now()
	i, err := strconv.Atoi(msg.Metadata.Get(keySeq))
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case err != nil || i < 0 || i >= len(t.seen):
		t.stray++
	case t.seen[i]:
		t.dups++
	default:
		t.seen[i] = true
		if t.at != nil {
			t.at[i] = now
		}
		if t.latest != nil {
			k := t.shape.index(i)
			if t.latest[k] > i+1 { // a later event of the aggregate came first
				t.disorder++
			} else {
				t.latest[k] = i + 1
			}
		}
		t.distinct++
		if t.distinct == len(t.seen) {
			close(t.done)
		}
	}
}

// wait returns when every event was delivered, or an error after the
// delivery timeout.
func (t *tally) wait(ctx context.Context, log *errLog) error {
	limit := deliveryTimeout + time.Duration(len(t.seen))*deliveryTimePerEvent
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-timer.C:
		t.mu.Lock()
		defer t.mu.Unlock()
		err := fmt.Errorf("%d of %d events delivered after %s", t.distinct, len(t.seen), limit)
		if last := log.last(); last != nil {
			err = fmt.Errorf("%w (last logged error: %w)", err, last)
		}
		return err
	}
}

// check reports stray messages, and events of an aggregate delivered out
// of order (see checkOrder), as an error.
func (t *tally) check(what string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stray > 0 {
		return fmt.Errorf("%s: %d unexpected messages at the sink", what, t.stray)
	}
	if t.disorder > 0 {
		return fmt.Errorf("%s: %d events reached the sink after a later event of their aggregate (%s)",
			what, t.disorder, t.shape)
	}
	return nil
}

// duplicates is how many deliveries repeated an event already delivered:
// at-least-once delivery allows them, and the table shows them.
func (t *tally) duplicates() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dups
}

// errLog is a watermill.LoggerAdapter that keeps only the last error, so
// a delivery timeout can say why.
type errLog struct {
	mu  sync.Mutex
	err error
}

func (l *errLog) Error(msg string, err error, _ watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = fmt.Errorf("%s: %w", msg, err)
}

func (l *errLog) last() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (*errLog) Info(string, watermill.LogFields)                   {}
func (*errLog) Debug(string, watermill.LogFields)                  {}
func (*errLog) Trace(string, watermill.LogFields)                  {}
func (l *errLog) With(watermill.LogFields) watermill.LoggerAdapter { return l }

// latencySample is one latency run: each event's time from its commit to
// its first delivery, and the deliveries that repeated an event.
type latencySample struct {
	latencies  []time.Duration
	duplicates int
}

// sample returns the latencies of a latency tally's events. A relay can
// see a row before COMMIT's reply reaches the writer; that is zero
// latency, not negative.
func (t *tally) sample(committed []time.Time) latencySample {
	t.mu.Lock()
	defer t.mu.Unlock()
	lat := make([]time.Duration, len(committed))
	for i := range lat {
		lat[i] = max(t.at[i].Sub(committed[i]), 0)
	}
	return latencySample{latencies: lat, duplicates: t.dups}
}
