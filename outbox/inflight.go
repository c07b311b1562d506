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
	entries map[string]inFlightEntry
}

// inFlightEntry is an id in flight: when its latest holder took it, and how
// many holders have not released it (more than one only after a TTL
// takeover), so that a late holder's Release does not free the id under
// the holder that took it over.
type inFlightEntry struct {
	since   time.Time
	holders int
}

// NewInFlight returns a tracker. ttl 0 means entries never expire; clock nil
// means [SystemClock].
func NewInFlight(ttl time.Duration, clock Clock) *InFlight {
	return &InFlight{ttl: ttl, clock: ClockOrSystem(clock), entries: make(map[string]inFlightEntry)}
}

// TryAcquire marks id in flight and reports true, or reports false when id is
// already in flight (and its entry has not expired).
func (f *InFlight) TryAcquire(id string) bool {
	now := f.clock.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.entries[id]
	if ok && (f.ttl <= 0 || now.Sub(e.since) < f.ttl) {
		return false
	}
	f.entries[id] = inFlightEntry{since: now, holders: e.holders + 1}
	return true
}

// Release ends one holder's tracking of id. The id is free again once
// every holder that acquired it has released it, or when the TTL has run
// out since the latest acquire.
func (f *InFlight) Release(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.entries[id]; ok && e.holders > 1 {
		e.holders--
		f.entries[id] = e
		return
	}
	delete(f.entries, id)
}

// Len returns the number of ids in flight, expired entries included.
func (f *InFlight) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.entries)
}
