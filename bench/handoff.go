package main

import (
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// handoffs measures, within one relay, how long each event of an
// aggregate waits for the handler once the event before it was handled:
// from the return of the handler of one event (the router acks it then) to
// the start of the handler of the next event of its aggregate.
type handoffs struct {
	mu      sync.Mutex
	handled map[string]time.Time // by aggregate id: when its last event's handler returned
	gaps    []time.Duration
}

func newHandoffs() *handoffs { return &handoffs{handled: make(map[string]time.Time)} }

// middleware times the hand-offs around the handler h.
func (g *handoffs) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		aggregate := msg.Metadata.Get(watermilladapter.MetadataAggregateID)
		start := time.Now()
		g.mu.Lock()
		if at, ok := g.handled[aggregate]; ok {
			g.gaps = append(g.gaps, start.Sub(at))
			delete(g.handled, aggregate)
		}
		g.mu.Unlock()
		out, err := h(msg)
		if err == nil {
			g.mu.Lock()
			g.handled[aggregate] = time.Now()
			g.mu.Unlock()
		}
		return out, err
	}
}

// sample returns the hand-offs measured.
func (g *handoffs) sample() []time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gaps
}
