package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/sqlcodec"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// MarkProcessed implements [outboxdriver.Driver], on the inbox table
// beside the outbox table (its name with "_inbox" appended), which
// [Migrate] creates. Like the store's other writes, it is refused in a
// transaction that MySQL rolled back ([ErrTransactionRolledBack]).
func (d *driver) MarkProcessed(ctx context.Context, tx *sql.Tx, consumer, id string, at time.Time) (bool, error) {
	if err := rolledBack(tx); err != nil {
		return false, err
	}
	recorded, err := sqlcodec.MarkProcessed(ctx, tx, d.t.InboxLabel, d.t.sql.markProcessed, consumer, id, at)
	return recorded, failedIn(ctx, tx, err)
}

// PurgeProcessedBatch implements [outboxdriver.Executor]. Like
// PurgeBatch, it passes over the records other transactions hold.
func (d *driver) PurgeProcessedBatch(ctx context.Context, p outboxdriver.PurgeParams) (int64, error) {
	n, err := d.deleteLocked(ctx, d.t.sql.purgeProcessedPick, []any{sqlcodec.Micros(p.Before), p.Limit}, d.t.sql.purgeProcessedDelete)
	if err != nil {
		return 0, fmt.Errorf("mysql: purge %s: %w", d.t.Inbox, err)
	}
	return n, nil
}
