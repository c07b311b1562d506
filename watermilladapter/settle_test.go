package watermilladapter

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// statementCounter is an outbox.Store that records each UpdateStatus call
// and answers at once; the settler uses nothing else of it here.
type statementCounter struct {
	outbox.Store
	mu      sync.Mutex
	batches []int
}

func (c *statementCounter) UpdateStatus(_ context.Context, updates ...outbox.StatusUpdate) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches = append(c.batches, len(updates))
	return int64(len(updates)), nil
}

// Outcomes that trickle in, as a steady stream of hot-path deliveries
// produces them, must share statements: a database that answers instantly
// would otherwise get one statement, one transaction, per outcome.
func TestSettlerRecordsOutcomesArrivingWithinTheLingerInOneStatement(t *testing.T) {
	store := &statementCounter{}
	st := newSettler(store, "relay", watermill.NopLogger{}, func(...string) {})
	const outcomes = 20
	start := time.Now()
	for i := range outcomes {
		st.update(outbox.Done(fmt.Sprint("event-", i)))
		time.Sleep(100 * time.Microsecond)
	}
	spread := time.Since(start)
	if err := st.close(); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range store.batches {
		total += n
	}
	if total != outcomes {
		t.Fatalf("recorded %d outcomes, want %d (batches %v)", total, outcomes, store.batches)
	}
	// One statement per linger the arrivals spanned, and one more for the
	// window a late arrival opens; without the linger, every outcome would
	// be a statement of its own.
	most := int(spread/settleLinger) + 2
	if len(store.batches) > most {
		t.Fatalf("%d outcomes arriving over %s took %d statements %v, want at most %d",
			outcomes, spread, len(store.batches), store.batches, most)
	}
}
