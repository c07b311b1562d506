package outbox

import (
	"crypto/rand"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

// ids makes event ids that increase strictly within this process: ULIDs
// whose time part never goes backwards and whose random part counts up
// within a millisecond. Reading the time and drawing the entropy happen
// under one lock; ulid.Make reads the clock outside its lock, so two
// goroutines can interleave and produce ids out of order.
var ids = struct {
	mu      sync.Mutex
	last    uint64
	entropy *ulid.MonotonicEntropy
}{entropy: ulid.Monotonic(rand.Reader, 0)}

// NewID returns a new event id: a monotonic ULID (26 characters).
func NewID() string {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	ms := max(ulid.Timestamp(time.Now()), ids.last)
	ids.last = ms
	id, err := ulid.New(ms, ids.entropy)
	if err != nil {
		// The random part overflowed within one millisecond (2^80 ids):
		// move to the next millisecond, where it starts afresh.
		ids.last++
		id = ulid.MustNew(ids.last, ids.entropy)
	}
	return id.String()
}
