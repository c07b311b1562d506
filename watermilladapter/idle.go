package watermilladapter

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// How often WaitIdle looks at the table, in real time: soon at first, then
// less and less often.
const (
	idleFirstLook = time.Millisecond
	idleMaxLook   = 50 * time.Millisecond
)

// WaitIdle waits until the relay is idle and returns nil; it returns
// [ErrSubscriberClosed] once the subscriber is closed, and an error that
// says what was still unsettled, wrapping the cause of ctx, when ctx ends
// first. It is meant for tests: publish, then wait until every event is
// handled, instead of sleeping.
//
// The relay is idle when it serves at least one topic (a subscription
// runs: call it once the router runs) and no event of the topics it serves
// is due and unsettled in the table: every NEW or RETRY event whose due
// time is at or before now, on the subscriber's Clock, has had its outcome
// recorded, whichever relay holds it. An event acked by its handler counts
// once its DONE is recorded, one nacked once its RETRY or DEAD is. Events
// not due yet do not keep the relay busy: a retry whose backoff has not
// run out, an event written with a later DeliverAfter or deferred with
// [outbox.RetryAfter]. Move a test clock past them, and WaitIdle waits for
// them again; on the system clock, they become due as time passes.
//
// What can keep it from ever being idle, so that WaitIdle waits until ctx
// ends: an event of a served topic claimed by a relay that died (until its
// lease ends); an ordered aggregate whose next events wait behind a
// retried, scheduled or DEAD event (they are due); events younger than
// SkipRecent on a clock that stands still; and an event claimed by another
// relay whose handler does not answer.
//
// WaitIdle reads the table (one backlog query per served topic) at
// growing intervals of real time, up to 50 ms. While the relay is not
// idle, it has the outcomes of handled events recorded at once rather
// than at the end of the settler's 50 ms linger (or of the pause before a
// failed statement is tried again), and wakes the cold paths
// of the busy topics, so that events committed in transactions the relay
// was not told of are claimed at once rather than at the next poll: on a
// clock that stands still, that claim waits for WakeCooldown after the
// previous one, until the test moves the clock. It is safe for concurrent
// use.
func (s *Subscriber) WaitIdle(ctx context.Context) error {
	look := time.NewTimer(0)
	defer look.Stop()
	wait := idleFirstLook
	busy := "it serves no topic yet"
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("watermilladapter: relay not idle: %s: %w", busy, context.Cause(ctx))
		case <-look.C:
		}
		topics, closed := s.servedTopics()
		if closed {
			return ErrSubscriberClosed
		}
		desc, err := s.unsettled(ctx, topics)
		switch {
		case err == nil && desc == "":
			return nil
		case err == nil:
			busy = desc
		case ctx.Err() == nil: // else keep what the last look saw
			busy = err.Error()
		}
		look.Reset(wait)
		wait = min(2*wait, idleMaxLook)
	}
}

// servedTopics returns the topics a subscription serves, sorted, and
// reports whether the subscriber is closed.
func (s *Subscriber) servedTopics() (topics []string, closed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for topic := range s.subs {
		topics = append(topics, topic)
	}
	slices.Sort(topics)
	return topics, s.closed
}

// unsettled describes the topics of topics with events due and not
// settled, and wakes their cold paths; "" when there is none (and there
// is a topic).
func (s *Subscriber) unsettled(ctx context.Context, topics []string) (string, error) {
	if len(topics) == 0 {
		return "it serves no topic yet", nil
	}
	now := s.cfg.Clock.Now()
	var busy []string
	for _, topic := range topics {
		pending, oldest, err := s.driver.Backlog(ctx, topic)
		if err != nil {
			return "", fmt.Errorf("backlog of topic %q: %w", topic, err)
		}
		if pending > 0 && !oldest.After(now) {
			s.Wake(topic)
			s.settler.hurry()
			busy = append(busy, fmt.Sprintf("topic %q: %d pending, the earliest due %s ago", topic, pending, now.Sub(oldest)))
		}
	}
	return strings.Join(busy, "; "), nil
}

// hurry ends the settler's linger, and the pause before it tries a failed
// statement again: the outcomes it holds are recorded now rather than
// when the linger or the pause ends on the clock, which a test clock may
// never move to (a statement a test's jump of the clock cut off waits for
// such a pause).
func (st *settler) hurry() {
	signal(st.cut)
	signal(st.hurried)
}
