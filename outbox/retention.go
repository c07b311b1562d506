package outbox

import (
	"cmp"
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/internal/ident"
	"github.com/wmoutbox/wmoutbox/internal/nilcheck"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// RetentionConfig configures [Store.Retain]. The zero value purges DONE
// events and inbox records after 7 days, keeps DEAD events, and runs every
// hour.
type RetentionConfig struct {
	// Done is how long DONE events are kept after delivery. Default 7
	// days; negative keeps them.
	Done time.Duration
	// Dead is how long DEAD events are kept after they died. Default 0:
	// they are kept until an operator replays or purges them
	// ([Store.ReplayDead], [Store.PurgeDead]); negative keeps them too;
	// positive purges them once that old.
	Dead time.Duration
	// Processed is how long the inbox keeps the ids of processed events
	// ([Inbox.MarkProcessed]): how long a duplicate is recognised. Default
	// 7 days; negative keeps them.
	Processed time.Duration
	// Interval is the time between two rounds, each wait jittered by ±10%
	// so that processes started together spread out. Default 1 hour.
	Interval time.Duration
	// BatchSize is the number of rows deleted per transaction. Default
	// 1000, at most 100000.
	BatchSize int
	// Owner names this process in the lease that lets one process at a
	// time purge a table; at most 255 characters. Default hostname, pid
	// and a random suffix.
	Owner string
	// Metrics receives the rows purged (Metrics.Purged) and failed rounds
	// (Metrics.StoreError with operation "retention"). Default none.
	Metrics Metrics
	// Logger receives the failures, at warning level, and each round's
	// purges, at debug level. Default the store's logger.
	Logger *slog.Logger
}

// Defaults of [RetentionConfig].
const (
	DefaultRetentionDone      = 7 * 24 * time.Hour
	DefaultRetentionProcessed = 7 * 24 * time.Hour
	DefaultRetentionInterval  = time.Hour
)

// RetentionLease is the name of the lease [Store.Retain] takes.
const RetentionLease = "retention"

// maxOwnerLen is the longest lease owner every dialect stores.
const maxOwnerLen = 255

// withDefaults returns cfg with its defaults set, or why it is invalid.
func (cfg RetentionConfig) withDefaults(logger *slog.Logger) (RetentionConfig, error) {
	switch {
	case cfg.Interval < 0:
		return cfg, invalidRequest("retention: negative Interval %s", cfg.Interval)
	case cfg.BatchSize < 0 || cfg.BatchSize > maxPurgeBatchLength:
		return cfg, invalidRequest("retention: BatchSize %d is not between 0 (default) and %d", cfg.BatchSize, maxPurgeBatchLength)
	}
	if reason := codec.CheckText(cfg.Owner, maxOwnerLen); reason != "" {
		return cfg, invalidRequest("retention: Owner %s", reason)
	}
	if cfg.Done == 0 {
		cfg.Done = DefaultRetentionDone
	}
	if cfg.Processed == 0 {
		cfg.Processed = DefaultRetentionProcessed
	}
	cfg.Interval = cmp.Or(cfg.Interval, DefaultRetentionInterval)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, defaultPurgeBatch)
	if cfg.Owner == "" {
		cfg.Owner = ident.Owner(maxOwnerLen)
	}
	if nilcheck.Is(cfg.Metrics) {
		cfg.Metrics = nil
	}
	if cfg.Logger == nil {
		cfg.Logger = logger
	}
	return cfg, nil
}

// Retain purges the table on a schedule until ctx ends, then returns nil;
// it returns an invalid cfg's error at once ([ErrInvalidRequest]). Each
// round, every cfg.Interval (jittered) from the call on, it takes or
// renews the lease [RetentionLease] on the table for twice the interval,
// and only while it holds it, purges DONE events older than cfg.Done, DEAD
// events older than cfg.Dead (when positive), and inbox records older than
// cfg.Processed, as [Store.Purge] and [Store.PurgeProcessed] do, in
// batches of cfg.BatchSize rows. Run it in every relay process: one of
// them at a time purges, and another takes over within two intervals of
// its stopping. A failure is logged and counted, and the round goes on
// with the next kind of rows. Waits use the store's clock.
func (s *Store[Tx]) Retain(ctx context.Context, cfg RetentionConfig) error {
	cfg, err := cfg.withDefaults(s.logger)
	if err != nil {
		return err
	}
	for {
		s.retentionRound(ctx, &cfg)
		timer := s.clock.NewTimer(jittered(cfg.Interval))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C():
		}
	}
}

// jittered returns d moved by up to ±10%, at random.
func jittered(d time.Duration) time.Duration {
	spread := int64(d / 5)
	if spread <= 0 {
		return d
	}
	return d - d/10 + time.Duration(rand.Int64N(spread+1))
}

// retentionRound takes the lease and, when held, purges what cfg says.
func (s *Store[Tx]) retentionRound(ctx context.Context, cfg *RetentionConfig) {
	now := s.clock.Now()
	held, err := s.driver.AcquireLease(ctx, outboxdriver.LeaseParams{Name: RetentionLease, Owner: cfg.Owner,
		Now: now, Until: now.Add(2 * cfg.Interval)})
	if err != nil {
		s.retentionFailed(ctx, cfg, "take the lease", err)
		return
	}
	if !held {
		cfg.Logger.DebugContext(ctx, "outbox: retention: another process holds the lease", slog.String("owner", cfg.Owner))
		return
	}
	purge := func(statuses []Status, olderThan time.Duration) func() (int64, error) {
		return func() (int64, error) {
			return s.Purge(ctx, PurgeRequest{OlderThan: olderThan, BatchSize: cfg.BatchSize, Statuses: statuses})
		}
	}
	for _, kind := range []struct {
		name      string
		olderThan time.Duration
		purge     func() (int64, error)
	}{
		{"done", cfg.Done, purge([]Status{StatusDone}, cfg.Done)},
		{"dead", cfg.Dead, purge([]Status{StatusDead}, cfg.Dead)},
		{"processed", cfg.Processed, func() (int64, error) { return s.purgeProcessed(ctx, cfg.Processed, cfg.BatchSize) }},
	} {
		if kind.olderThan <= 0 || ctx.Err() != nil {
			continue
		}
		n, err := kind.purge()
		if cfg.Metrics != nil {
			cfg.Metrics.Purged(kind.name, n)
		}
		if err != nil {
			s.retentionFailed(ctx, cfg, "purge "+kind.name, err)
			continue
		}
		cfg.Logger.DebugContext(ctx, "outbox: retention: purged", slog.String("kind", kind.name), slog.Int64("rows", n))
	}
}

// retentionFailed logs and counts a failed step of a round, unless ctx
// ended, which is how Retain stops.
func (s *Store[Tx]) retentionFailed(ctx context.Context, cfg *RetentionConfig, op string, err error) {
	if ctx.Err() != nil {
		return
	}
	cfg.Logger.WarnContext(ctx, "outbox: retention: "+op+" failed; retrying next round",
		slog.String("owner", cfg.Owner), slog.Any("error", err))
	if cfg.Metrics != nil {
		cfg.Metrics.StoreError("", "retention")
	}
}
