package watermilladapter

import (
	"sync"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// inFlight tracks the event ids being processed in this process, so that
// an event reaching the workers twice (hot path and claim, or two claims)
// is handled once at a time. It is safe for concurrent use.
//
// With a TTL, an entry older than the TTL no longer blocks: a worker that
// never released its event (a bug, a stuck handler) cannot block the event
// forever.
type inFlight struct {
	ttl   time.Duration
	clock outbox.Clock

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

// newInFlight returns a tracker. ttl 0 means entries never expire.
func newInFlight(ttl time.Duration, clock outbox.Clock) *inFlight {
	return &inFlight{ttl: ttl, clock: clock, entries: make(map[string]inFlightEntry)}
}

// tryAcquire marks id in flight and reports true, or reports false when id is
// already in flight (and its entry has not expired).
func (f *inFlight) tryAcquire(id string) bool {
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

// release ends one holder's tracking of id. The id is free again once
// every holder that acquired it has released it, or when the TTL has run
// out since the latest acquire.
func (f *inFlight) release(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.entries[id]; ok && e.holders > 1 {
		e.holders--
		f.entries[id] = e
		return
	}
	delete(f.entries, id)
}

// len returns the number of ids in flight, expired entries included.
func (f *inFlight) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.entries)
}
