//go:build faults

package faults

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
)

// The MySQL scenarios keep the same ledger as the PostgreSQL ones (see
// ledgerSchema), in their MariaDB test database (internal/testmysql),
// beside the outbox table. Ids are VARBINARY, compared byte for byte, as
// the outbox table's are.
var mysqlLedgerSchema = []string{
	`CREATE TABLE fault_written (event_id varbinary(144) NOT NULL PRIMARY KEY) ENGINE = InnoDB`,
	`CREATE TABLE fault_rolled_back (event_id varbinary(144) NOT NULL PRIMARY KEY) ENGINE = InnoDB`,
	`CREATE TABLE fault_delivered (event_id varbinary(144) NOT NULL, by_relay varbinary(128) NOT NULL DEFAULT '',
    KEY fault_delivered_id_idx (event_id), KEY fault_delivered_by_idx (by_relay)) ENGINE = InnoDB`,
}

// mysqlLedger is the ledger of the MySQL scenarios.
type mysqlLedger struct{ db *sql.DB }

// newMySQLLedger creates the ledger's tables in db's database, which holds
// the outbox table of the default configuration.
func newMySQLLedger(t *testing.T, db *sql.DB, scenario string) *ledger {
	t.Helper()
	for _, stmt := range mysqlLedgerSchema {
		_, err := db.ExecContext(t.Context(), stmt)
		require.NoError(t, err)
	}
	return &ledger{db: mysqlLedger{db}, scenario: scenario}
}

// mysqlRowsPerInsert bounds the rows of one ledger insert statement.
const mysqlRowsPerInsert = 500

// insertValues inserts rows of the given columns into table, at most
// mysqlRowsPerInsert rows a statement.
func insertValues(ctx context.Context, tx *sql.Tx, table string, columns []string, rows [][]any) error {
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(columns)), ", ") + ")"
	for len(rows) > 0 {
		n := min(len(rows), mysqlRowsPerInsert)
		args := make([]any, 0, n*len(columns))
		for _, r := range rows[:n] {
			args = append(args, r...)
		}
		query := fmt.Sprintf("INSERT INTO %s (%s) VALUES %s", table, strings.Join(columns, ", "),
			strings.TrimSuffix(strings.Repeat(tuple+", ", n), ", "))
		if _, err := tx.ExecContext(ctx, query, args...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

func idRows(ids []string) [][]any {
	rows := make([][]any, len(ids))
	for i, id := range ids {
		rows[i] = []any{id}
	}
	return rows
}

// recordWrittenMySQL is recordWritten in a MySQL transaction.
func recordWrittenMySQL(ctx context.Context, tx *sql.Tx, ids []string) error {
	return insertValues(ctx, tx, "fault_written", []string{"event_id"}, idRows(ids))
}

// recordDeliveredMySQL is recordDelivered on a MySQL database.
func recordDeliveredMySQL(ctx context.Context, db *sql.DB, id, by string) error {
	_, err := db.ExecContext(ctx, `INSERT INTO fault_delivered (event_id, by_relay) VALUES (?, ?)`, id, by)
	return err
}

func (my mysqlLedger) flush(ctx context.Context, delivered []delivery, rolledBack []string) error {
	tx, err := my.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	rows := make([][]any, len(delivered))
	for i, d := range delivered {
		rows[i] = []any{d.id, d.by}
	}
	if err := insertValues(ctx, tx, "fault_delivered", []string{"event_id", "by_relay"}, rows); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := insertValues(ctx, tx, "fault_rolled_back", []string{"event_id"}, idRows(rolledBack)); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func (my mysqlLedger) count(ctx context.Context) (figures, error) {
	var f figures
	err := my.db.QueryRowContext(ctx, `
SELECT (SELECT count(*) FROM fault_written),
       (SELECT count(*) FROM fault_rolled_back),
       (SELECT count(*) FROM fault_delivered),
       (SELECT count(DISTINCT event_id) FROM fault_delivered),
       (SELECT count(*) FROM fault_written w
         WHERE NOT EXISTS (SELECT 1 FROM fault_delivered d WHERE d.event_id = w.event_id)),
       (SELECT count(DISTINCT event_id) FROM fault_delivered d
         WHERE NOT EXISTS (SELECT 1 FROM fault_written w WHERE w.event_id = d.event_id))`).
		Scan(&f.events, &f.rolledBack, &f.deliveries, &f.distinct, &f.lost, &f.phantom)
	f.duplicates = f.deliveries - f.distinct
	return f, err
}

func (my mysqlLedger) outboxState(ctx context.Context) (tableState, error) {
	return mysqlOutboxState(ctx, my.db)
}

// mysqlOutboxState is outboxState on MySQL's outbox table.
func mysqlOutboxState(ctx context.Context, db *sql.DB) (tableState, error) {
	var s tableState
	err := db.QueryRowContext(ctx, `
SELECT count(*), count(CASE WHEN status = 1 THEN 1 END), count(CASE WHEN status IN (0, 2) THEN 1 END),
       count(CASE WHEN status = 3 THEN 1 END),
       count(CASE WHEN locked_by IS NOT NULL OR locked_at IS NOT NULL OR locked_until IS NOT NULL THEN 1 END)
FROM outbox_event`).Scan(&s.total, &s.done, &s.pending, &s.dead, &s.claimed)
	return s, err
}

// writeWithWriterMySQL is writeWithWriter on a MySQL store: no hot path,
// the relays' pollers deliver.
func writeWithWriterMySQL(store *mysql.Store, w *outbox.Writer[*sql.Tx], topic string) writeFunc {
	return func(ctx context.Context, ids []string, rollback bool) error {
		return store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			envs := make([]outbox.Envelope, len(ids))
			for i, id := range ids {
				envs[i] = outbox.Envelope{ID: id, Type: faultTested, Topic: topic, PayloadJSON: payloadFor(id)}
			}
			if _, err := w.Write(ctx, tx, envs...); err != nil {
				return err
			}
			if err := recordWrittenMySQL(ctx, tx, ids); err != nil {
				return err
			}
			if rollback {
				return errRollback
			}
			return nil
		})
	}
}

// openMySQLStore is a store of the default configuration on db.
func openMySQLStore(t *testing.T, db *sql.DB) *mysql.Store {
	t.Helper()
	store, err := mysql.NewStore(db, mysql.Config{})
	require.NoError(t, err)
	return store
}
