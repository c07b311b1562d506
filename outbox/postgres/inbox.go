package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// MarkProcessed implements [outboxdriver.Driver], on the inbox table beside
// the outbox table (its name with "_inbox" appended), which [Migrate]
// creates.
func (d *driver) MarkProcessed(ctx context.Context, tx pgx.Tx, consumer, id string, at time.Time) (bool, error) {
	tag, err := tx.Exec(ctx, d.t.sql.markProcessed, consumer, id, at)
	if err != nil {
		return false, fmt.Errorf("postgres: record event %s processed by %s in %s: %w", id, consumer, d.t.inbox, err)
	}
	return tag.RowsAffected() == 1, nil
}

// PurgeProcessedBatch implements [outboxdriver.Executor]. It passes over
// records that a transaction holds locked.
func (d *driver) PurgeProcessedBatch(ctx context.Context, p outboxdriver.PurgeParams) (int64, error) {
	tag, err := d.db.Exec(ctx, d.t.sql.purgeProcessed, p.Before, p.Limit)
	if err != nil {
		return 0, fmt.Errorf("postgres: purge %s: %w", d.t.inbox, err)
	}
	return tag.RowsAffected(), nil
}
