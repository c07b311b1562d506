package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/sqlcodec"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// MarkProcessed implements [outboxdriver.Driver], on the inbox table
// beside the outbox table (its name with "_inbox" appended), which
// [Migrate] creates.
func (d *driver) MarkProcessed(ctx context.Context, tx *sql.Tx, consumer, id string, at time.Time) (bool, error) {
	return sqlcodec.MarkProcessed(ctx, tx, d.t.InboxLabel, d.t.sql.markProcessed, consumer, id, at)
}

// PurgeProcessedBatch implements [outboxdriver.Executor] in one
// statement, which is its own transaction.
func (d *driver) PurgeProcessedBatch(ctx context.Context, p outboxdriver.PurgeParams) (int64, error) {
	return d.exec(ctx, "purge "+d.t.Inbox, d.t.sql.purgeProcessed, sqlcodec.Micros(p.Before), p.Limit)
}
