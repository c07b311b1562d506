package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wmoutbox/wmoutbox/outbox"
)

var _ outbox.Inbox[pgx.Tx] = (*Store)(nil)

// MarkProcessed implements [outbox.Inbox], on the inbox table beside the
// outbox table (its name with "_inbox" appended), which [Migrate] creates.
func (s *Store) MarkProcessed(ctx context.Context, tx pgx.Tx, consumer, id string) (bool, error) {
	if tx == nil {
		return false, outbox.ErrNoTransaction
	}
	if err := outbox.ValidateProcessed(consumer, id); err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, s.t.sql.markProcessed, consumer, id, s.clock.Now())
	if err != nil {
		return false, fmt.Errorf("postgres: record event %s processed by %s in %s: %w", id, consumer, s.t.inbox, err)
	}
	return tag.RowsAffected() == 1, nil
}

// PurgeProcessed implements [outbox.Inbox]. Batches pass over records
// that a transaction holds locked.
func (s *Store) PurgeProcessed(ctx context.Context, olderThan time.Duration) (int64, error) {
	if err := outbox.ValidateRetention(olderThan); err != nil {
		return 0, err
	}
	cutoff := s.clock.Now().Add(-olderThan)
	return outbox.PurgeInBatches(outbox.DefaultPurgeBatch, func(deleted int64) (int64, error) {
		tag, err := s.db.Exec(ctx, s.t.sql.purgeProcessed, cutoff, outbox.DefaultPurgeBatch)
		if err != nil {
			return 0, fmt.Errorf("postgres: purge %s after %d rows: %w", s.t.inbox, deleted, err)
		}
		return tag.RowsAffected(), nil
	})
}
