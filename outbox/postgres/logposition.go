package postgres

import (
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// logPosition is where a log feed may confirm its slot: past the
// transactions it handed over whose events are all settled, up to the
// first that is not. The relay settles transactions from its own
// goroutines, in any order; the feed reads the position for its status
// updates and its progress row. It is safe for concurrent use.
type logPosition struct {
	clock outbox.Clock

	mu        sync.Mutex
	confirmed pglogrepl.LSN
	advanced  time.Time // when confirmed last moved
	// pending are the transactions handed over and the positions passed
	// since the first of them that is not settled, in commit order.
	pending []*logCommit
}

// logCommit is a place in the stream that the position waits for:
// settled once a transaction's events are all settled, or at once for a
// position the stream passed with nothing to hand over.
type logCommit struct {
	end     pglogrepl.LSN
	settled bool
}

// newLogPosition starts at from: the slot's confirmed position.
func newLogPosition(clock outbox.Clock, from pglogrepl.LSN) *logPosition {
	return &logPosition{clock: clock, confirmed: from, advanced: clock.Now()}
}

// current returns the confirmed position and when it last moved.
func (p *logPosition) current() (pglogrepl.LSN, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.confirmed, p.advanced
}

// raise moves the position to at least lsn: where the slot stands when a
// feed starts to read it, which another reader may have moved.
func (p *logPosition) raise(lsn pglogrepl.LSN) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advance(lsn)
}

// hand records a transaction handed over that ends at end, and returns
// the function that settles it: safe to call from any goroutine, more
// than once, and it never blocks for longer than the bookkeeping.
func (p *logPosition) hand(end pglogrepl.LSN) func() {
	c := &logCommit{end: end}
	p.mu.Lock()
	p.pending = append(p.pending, c)
	p.mu.Unlock()
	return func() { p.settle(c) }
}

// pass records that the stream went past lsn with nothing to hand over
// (a transaction without events, the position of a keepalive): the
// position follows it at once when nothing is pending, otherwise once
// what is pending is settled.
func (p *logPosition) pass(lsn pglogrepl.LSN) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.pending)
	switch {
	case n == 0:
		p.advance(lsn)
	case p.pending[n-1].settled:
		// A run of passes needs one place: the last.
		p.pending[n-1].end = max(p.pending[n-1].end, lsn)
	default:
		p.pending = append(p.pending, &logCommit{end: lsn, settled: true})
	}
}

func (p *logPosition) settle(c *logCommit) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.settled = true
	i := 0
	for i < len(p.pending) && p.pending[i].settled {
		p.advance(p.pending[i].end)
		i++
	}
	if i > 0 {
		clear(p.pending[:i]) // let the settled go
		p.pending = p.pending[i:]
	}
}

// advance moves confirmed forward to lsn; p.mu is held.
func (p *logPosition) advance(lsn pglogrepl.LSN) {
	if lsn > p.confirmed {
		p.confirmed, p.advanced = lsn, p.clock.Now()
	}
}
