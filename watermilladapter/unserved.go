package watermilladapter

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// watchUnserved reads, every BacklogInterval until the subscriber closes,
// the pending events of the topics no subscription of this subscriber
// serves: for Metrics.Unserved and, with UnroutableAfter, to make those
// that waited that long DEAD.
func (s *Subscriber) watchUnserved() {
	cfg := &s.cfg
	timer := cfg.Clock.NewTimer(cfg.BacklogInterval)
	defer timer.Stop()
	reported := make(map[string]bool) // topics reported above 0
	for {
		s.readUnserved(reported)
		select {
		case <-s.stopped.Done():
			return
		case <-timer.C():
			timer.Reset(cfg.BacklogInterval)
		}
	}
}

// readUnserved reports the pending events of unserved topics, and 0 for
// the topics of reported that are served or empty now.
func (s *Subscriber) readUnserved(reported map[string]bool) {
	cfg := &s.cfg
	ctx, cancel := withTimeout(s.stopped, cfg.Clock, claimTimeout)
	defer cancel()
	now := cfg.Clock.Now()
	res, err := s.driver.Stats(ctx, outboxdriver.StatsParams{Now: now, PendingOnly: true})
	if err != nil {
		if s.stopped.Err() == nil {
			cfg.Logger.Error("outbox: unserved topics query failed", slog.Any("error", err))
			cfg.Metrics.StoreError("", "unserved")
		}
		return
	}
	pending := make(map[string]int64)
	for _, t := range res.Topics {
		if st := outbox.Status(t.Status); st == outbox.StatusNew || st == outbox.StatusRetry {
			pending[t.Topic] += t.Count
		}
	}
	for topic, n := range pending {
		if s.serves(topic) {
			continue
		}
		cfg.Metrics.Unserved(topic, n)
		reported[topic] = true
		if cfg.UnroutableAfter > 0 && !now.Before(s.firstSubscribe().Add(cfg.UnroutableAfter)) {
			s.killUnroutable(ctx, topic, now)
		}
	}
	for topic := range reported {
		if pending[topic] == 0 || s.serves(topic) {
			cfg.Metrics.Unserved(topic, 0)
			delete(reported, topic)
		}
	}
}

// serves reports whether a subscription of s serves topic.
func (s *Subscriber) serves(topic string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs[topic]) > 0
}

// firstSubscribe returns when the first subscription of s started.
func (s *Subscriber) firstSubscribe() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// killUnroutable makes DEAD the events of topic, which no subscription
// serves, created UnroutableAfter ago or earlier and not claimed by any
// relay, BatchSize of them per call: it claims them, as any relay would,
// so that a relay of another process holding one keeps it; and if a
// subscription of the topic started meanwhile, it hands them back.
func (s *Subscriber) killUnroutable(ctx context.Context, topic string, now time.Time) {
	cfg := &s.cfg
	rows, err := s.driver.Claim(ctx, &outboxdriver.ClaimParams{Owner: s.owner, Topic: topic, Now: now,
		CreatedBefore: now.Add(-cfg.UnroutableAfter), LockedUntil: now.Add(cfg.LockTimeout), Limit: cfg.BatchSize})
	if err != nil {
		cfg.Logger.Error("outbox: claim of unroutable events failed", slog.String("topic", topic), slog.Any("error", err))
		cfg.Metrics.StoreError(topic, "claim")
		return
	}
	if len(rows) == 0 {
		return
	}
	if s.serves(topic) {
		s.settler.release(releaseItems(rows, topic))
		return
	}
	reason := fmt.Sprintf("no subscription for topic %s within %s", topic, cfg.UnroutableAfter)
	group, _ := codec.ErrorGroup(reason)
	outcomes := make([]outboxdriver.Outcome, len(rows))
	for i, r := range rows {
		outcomes[i] = outboxdriver.Outcome{ID: r.ID, Status: int16(outbox.StatusDead), Error: reason, ErrorGroup: group}
	}
	if _, err := s.driver.RecordOutcomes(ctx, outboxdriver.RecordOutcomesParams{Now: now, Owner: s.owner, Outcomes: outcomes}); err != nil {
		cfg.Logger.Error("outbox: recording unroutable events DEAD failed; their claims will expire",
			slog.String("topic", topic), slog.Any("error", err))
		cfg.Metrics.StoreError(topic, "record")
		return
	}
	for range rows {
		cfg.Metrics.Dead(topic)
	}
	cfg.Logger.Error("outbox: events of a topic no subscription serves are DEAD",
		slog.String("topic", topic), slog.Int("events", len(rows)), slog.Duration("unroutable_after", cfg.UnroutableAfter))
}

// releaseItems returns the releases of rows of topic.
func releaseItems(rows []outboxdriver.Row, topic string) []releaseItem {
	items := make([]releaseItem, len(rows))
	for i, r := range rows {
		items[i] = releaseItem{id: r.ID, topic: topic}
	}
	return items
}
