package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/sqlcodec"
	"github.com/wmoutbox/wmoutbox/outbox"
)

var _ outbox.Inbox[*sql.Tx] = (*Store)(nil)

// MarkProcessed implements [outbox.Inbox], on the inbox table beside the
// outbox table (its name with "_inbox" appended), which [Migrate] creates.
func (s *Store) MarkProcessed(ctx context.Context, tx *sql.Tx, consumer, id string) (bool, error) {
	return sqlcodec.MarkProcessed(ctx, tx, s.t.InboxLabel, s.t.sql.markProcessed, consumer, id, s.clock.Now())
}

// PurgeProcessed implements [outbox.Inbox].
func (s *Store) PurgeProcessed(ctx context.Context, olderThan time.Duration) (int64, error) {
	if err := outbox.ValidateRetention(olderThan); err != nil {
		return 0, err
	}
	cutoff := sqlcodec.Micros(s.clock.Now().Add(-olderThan))
	return outbox.PurgeInBatches(outbox.DefaultPurgeBatch, func(deleted int64) (int64, error) {
		return s.exec(ctx, fmt.Sprintf("purge %s after %d rows", s.t.Inbox, deleted), s.t.sql.purgeProcessed, cutoff, outbox.DefaultPurgeBatch)
	})
}
