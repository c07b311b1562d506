package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

var _ outboxdriver.FeedOrderer = (*driver)(nil)

// UnfinishedBefore implements [outboxdriver.FeedOrderer] in one
// statement, whatever the number of rows.
func (d *driver) UnfinishedBefore(ctx context.Context, p outboxdriver.UnfinishedBeforeParams) ([]bool, error) {
	n := len(p.Rows)
	types, ids, seqs := make(array[text], n), make(array[text], n), make([]int64, n)
	for i, r := range p.Rows {
		types[i], ids[i], seqs[i] = text(r.AggregateType), text(r.AggregateID), r.Seq
	}
	rows, err := d.db.Query(ctx, d.t.sql.unfinishedBefore, p.Topic, types, ids, seqs)
	var places []int64
	if err == nil {
		places, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: unfinished events before: %w", d.t.notMigrated(err))
	}
	unfinished := make([]bool, n)
	for _, i := range places {
		unfinished[i-1] = true
	}
	return unfinished, nil
}

// LeaseFirst implements [outboxdriver.FeedOrderer] in one statement.
func (d *driver) LeaseFirst(ctx context.Context, p outboxdriver.LeaseFirstParams) ([]outboxdriver.Row, error) {
	rows, err := d.db.Query(ctx, d.t.sql.leaseFirst, p.Now, p.IDs, p.LockedUntil, p.Topic, p.Owner)
	var leased []outboxdriver.Row
	if err == nil {
		leased, err = collectRows(rows, len(p.IDs))
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: lease the first events of aggregates: %w", d.t.notMigrated(err))
	}
	return leased, nil
}
