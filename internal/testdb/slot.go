package testdb

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// LogicalSlot creates a logical replication slot (pgoutput) of its own in
// the database at url, and returns its name. The slot is dropped at
// t.Cleanup: one left behind keeps the server's log for ever, and takes
// one of its few slots. It skips the test when the server's wal_level is
// not logical, or fails it under CI=true. Creating a slot waits for the
// server's running transactions to end.
func LogicalSlot(t testing.TB, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("testdb: slot: %v", err)
	}
	defer closeConn(conn)
	RequireLogicalDecoding(t, conn)
	name := fmt.Sprintf("wmoutbox_test_%d_%d", os.Getpid(), counter.Add(1))
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, name); err != nil {
		t.Fatalf("testdb: create slot %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			defer closeConn(conn)
			_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, name)
		}
		if err != nil {
			t.Errorf("testdb: drop slot %s: %v", name, err)
		}
	})
	return name
}
