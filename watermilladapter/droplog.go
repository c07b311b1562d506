package watermilladapter

import (
	"log/slog"
	"sync"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// dropLogInterval is the least time between two log lines of one topic
// and cause of drop.
const dropLogInterval = time.Minute

// The causes of a drop: an event the hot path or a queue left to a later
// claim. Each is a warning, logged with the remedy.
const (
	dropLateCommit = "outbox: transaction committed after half the claim of its events; events left to the next claim " +
		"(raise LockTimeout above your longest transactions)"
	dropHotFull = "outbox: hot path full or topic not served here; events left to the cold path " +
		"(raise HotQueueCapacity or WorkerCount)"
	dropQueued = "outbox: claim half spent in the queue; events left to the next claim " +
		"(raise LockTimeout or WorkerCount, or lower the queue capacities)"
	dropReader = "outbox: claim half spent waiting for the subscription's reader; events left to the next claim " +
		"(raise LockTimeout, or read the channel concurrently, as a Watermill router does)"
)

// dropLog logs drops at warn level, counted: the first drop of a topic
// and cause at once, then one line per dropLogInterval at most, with how
// many events were dropped since the line before. A drop costs latency,
// never an event; under load it can happen thousands of times a second,
// which one line a minute says as well.
type dropLog struct {
	logger *slog.Logger
	clock  outbox.Clock

	mu     sync.Mutex
	drops  map[dropKey]*dropCount
	totals map[string]int // by cause, since the start
}

type dropKey struct{ topic, cause string }

type dropCount struct {
	logged time.Time // of the last line; zero before the first
	events int       // dropped since
}

func newDropLog(logger *slog.Logger, clock outbox.Clock) *dropLog {
	return &dropLog{logger: logger, clock: clock, drops: make(map[dropKey]*dropCount), totals: make(map[string]int)}
}

// add counts one event of topic dropped for cause, and logs the count
// when the interval since the last line of the two is over.
func (d *dropLog) add(topic, cause string) {
	now := d.clock.Now()
	d.mu.Lock()
	key := dropKey{topic, cause}
	c := d.drops[key]
	if c == nil {
		c = &dropCount{}
		d.drops[key] = c
	}
	c.events++
	d.totals[cause]++
	if !c.logged.IsZero() && now.Sub(c.logged) < dropLogInterval {
		d.mu.Unlock()
		return
	}
	events := c.events
	c.logged, c.events = now, 0
	d.mu.Unlock()
	d.logger.Warn(cause, slog.String("topic", topic), slog.Int("events", events), slog.Duration("per", dropLogInterval))
}

// total returns how many events were dropped for cause.
func (d *dropLog) total(cause string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.totals[cause]
}
