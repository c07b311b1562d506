package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

var _ outboxdriver.LogSlotReader = (*driver)(nil)

// LogSlots implements [outboxdriver.LogSlotReader] in one statement over
// pg_replication_slots: the logical slots of the store's database, with
// the progress the feeds of this table recorded in its lease table.
func (d *driver) LogSlots(ctx context.Context) ([]outboxdriver.LogSlot, error) {
	rows, err := d.db.Query(ctx, d.t.sql.logSlots, outboxdriver.SlotLeasePrefix)
	var slots []outboxdriver.LogSlot
	if err == nil {
		slots, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxdriver.LogSlot, error) {
			var (
				s         outboxdriver.LogSlot
				confirmed *time.Time
			)
			err := row.Scan(&s.Name, &s.Active, &s.LagBytes, &s.WALStatus, &s.Reader, &confirmed)
			if confirmed != nil {
				s.ConfirmedAt = *confirmed
			}
			return s, err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: log slots of %s: %w", d.t.qualified, err)
	}
	return slots, nil
}
