package outbox

import (
	"sync"
	"time"
)

// InFlight tracks the event ids being processed in this process, so that an
// event reaching the dispatcher twice (hot path and poller, or two polls) is
// handled once at a time. It is safe for concurrent use.
//
// With a TTL, an entry older than the TTL no longer blocks: a worker that
// never released its event (a bug, a stuck handler) cannot block the event
// forever.
type InFlight struct {
	ttl   time.Duration
	clock Clock

	mu      sync.Mutex
	entries map[string]time.Time
}

// NewInFlight returns a tracker. ttl 0 means entries never expire; clock nil
// means [SystemClock].
func NewInFlight(ttl time.Duration, clock Clock) *InFlight {
	return &InFlight{ttl: ttl, clock: ClockOrSystem(clock), entries: make(map[string]time.Time)}
}

// TryAcquire marks id in flight and reports true, or reports false when id is
// already in flight (and its entry has not expired).
func (f *InFlight) TryAcquire(id string) bool {
	now := f.clock.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if since, ok := f.entries[id]; ok && (f.ttl <= 0 || now.Sub(since) < f.ttl) {
		return false
	}
	f.entries[id] = now
	return true
}

// Release ends the tracking of id.
func (f *InFlight) Release(id string) {
	f.mu.Lock()
	delete(f.entries, id)
	f.mu.Unlock()
}

// Len returns the number of ids in flight, expired entries included.
func (f *InFlight) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.entries)
}
