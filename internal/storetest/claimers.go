package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// Claimer is one of several relays claiming at the same time: Params run
// on Driver. Params.Topic and Params.Owner are required; zero times are
// those of each claim, on the system clock (now, nothing recent left out,
// a lease of [DefaultLease]), and a zero Limit is 100.
type Claimer struct {
	Driver outboxdriver.Executor
	Params outboxdriver.ClaimParams
}

// params returns c's claim at the time it runs.
func (c *Claimer) params() *outboxdriver.ClaimParams {
	p := c.Params
	now := time.Now()
	if p.Now.IsZero() {
		p.Now = now
	}
	if p.CreatedBefore.IsZero() {
		p.CreatedBefore = now
	}
	if p.LockedUntil.IsZero() {
		p.LockedUntil = now.Add(DefaultLease)
	}
	if p.Limit == 0 {
		p.Limit = 100
	}
	return &p
}

// ClaimConcurrently starts every claimer at once; each claims until it
// gets nothing. It fails the test unless no event is claimed twice and the
// claims together are exactly want. An error for which retry (if set)
// reports true makes that claimer try again, as a relay would; it returns
// how many times that happened.
func ClaimConcurrently(t *testing.T, claimers []Claimer, want []string, retry func(error) bool) (retried int) {
	t.Helper()
	got := make([][]string, len(claimers))
	errs := make([]error, len(claimers))
	retries := make([]int, len(claimers))
	ready := make(chan struct{})
	var wg sync.WaitGroup
	for i := range claimers {
		c := &claimers[i]
		wg.Go(func() {
			<-ready
			for {
				batch, err := c.Driver.Claim(t.Context(), c.params())
				if err != nil && retry != nil && retry(err) {
					retries[i]++
					continue
				}
				if err != nil {
					errs[i] = err
					return
				}
				if len(batch) == 0 {
					return
				}
				got[i] = append(got[i], IDs(batch)...)
			}
		})
	}
	close(ready)
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}

	seen := make(map[string]int, len(want))
	busy := 0
	for i, claimed := range got {
		if len(claimed) > 0 {
			busy++
		}
		retried += retries[i]
		for _, id := range claimed {
			if prev, dup := seen[id]; dup {
				t.Fatalf("event %s claimed by %d and %d", id, prev, i)
			}
			seen[id] = i
		}
	}
	require.Len(t, seen, len(want), "the union is every row")
	for _, id := range want {
		if _, ok := seen[id]; !ok {
			t.Fatalf("event %s claimed by nobody", id)
		}
	}
	t.Logf("%d of %d claimers got rows; %d claims retried", busy, len(claimers), retried)
	return retried
}
