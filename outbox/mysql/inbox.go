package mysql

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
// Like the store's writes, it is refused in a transaction that MySQL
// rolled back ([ErrTransactionRolledBack]).
func (s *Store) MarkProcessed(ctx context.Context, tx *sql.Tx, consumer, id string) (bool, error) {
	if err := rolledBack(tx); err != nil {
		return false, err
	}
	recorded, err := sqlcodec.MarkProcessed(ctx, tx, s.t.InboxLabel, s.t.sql.markProcessed, consumer, id, s.clock.Now())
	return recorded, failedIn(ctx, tx, err)
}

// PurgeProcessed implements [outbox.Inbox]. Like [Store.Purge], it passes
// over the records other transactions hold.
func (s *Store) PurgeProcessed(ctx context.Context, olderThan time.Duration) (int64, error) {
	if err := outbox.ValidateRetention(olderThan); err != nil {
		return 0, err
	}
	cutoff := sqlcodec.Micros(s.clock.Now().Add(-olderThan))
	return outbox.PurgeInBatches(outbox.DefaultPurgeBatch, func(deleted int64) (int64, error) {
		n, err := s.deleteLocked(ctx, s.t.sql.purgeProcessedPick, []any{cutoff, outbox.DefaultPurgeBatch}, s.t.sql.purgeProcessedDelete)
		if err != nil {
			return 0, fmt.Errorf("mysql: purge %s after %d rows: %w", s.t.Inbox, deleted, err)
		}
		return n, nil
	})
}
