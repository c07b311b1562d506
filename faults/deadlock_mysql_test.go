//go:build faults

package faults

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/testmysql"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// TestDeadlockedWriteMySQL writes in a business transaction that InnoDB
// picks as a deadlock's victim. MySQL then rolls the whole transaction
// back (not only the statement, as after a duplicate id), and the
// session's later statements run in autocommit mode, each committed on
// its own, while database/sql's *sql.Tx still looks open and its Commit
// returns nil. (Before outbox/mysql's ErrTransactionRolledBack, mysql.InTx
// then returned nil with the events written before the deadlock gone, and
// a write after it committed alone: this test failed in all three cases.)
//
// Here a business transaction writes event X, then a write of event Y
// deadlocks with another transaction (each waits for an id the other
// inserted; InnoDB picks the lighter one, the business's, as the victim).
// The business goes on, writes event Z if the store lets it, and then
// ends its transaction:
//
//   - mysql.InTx, fn returns nil: InTx must not return nil unless X and Z
//     are stored (X, written before the deadlock, is gone: lost);
//   - mysql.InTx, fn rolls back on a business rule: neither may be stored
//     (Z, written after the deadlock, would commit on its own: a phantom
//     event that a relay delivers);
//   - a transaction the caller began itself, committed with tx.Commit
//     unless a write failed: the same as the first;
//   - the same transaction, its business ignoring the failed writes: a
//     statement of its own after the deadlock must fail (the store ended
//     the *sql.Tx) rather than commit alone, and so must its Commit.
//
// Every write uses the context the business has: InTx's, or the caller's.
func TestDeadlockedWriteMySQL(t *testing.T) {
	t.Parallel()
	db := testmysql.New(t)
	store := openMySQLStore(t, db)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)

	// business writes X, deadlocks writing Y, and writes Z unless a
	// write fails.
	business := func(ctx context.Context, tx *sql.Tx, x, y, z outbox.Envelope) (deadlock, err error) {
		if _, err := writer.Write(ctx, tx, x); err != nil {
			return nil, err
		}
		deadlock = deadlockWrite(ctx, t, db, tx, writer, y, x)
		// The business goes on, as after a duplicate id it may.
		_, err = writer.Write(ctx, tx, z)
		return deadlock, err
	}
	cases := []struct {
		name string
		run  func(x, y, z outbox.Envelope) (deadlock, end error)
	}{
		{"InTx, fn returns nil", func(x, y, z outbox.Envelope) (deadlock, end error) {
			end = store.InTx(t.Context(), func(ctx context.Context, tx *sql.Tx) (err error) {
				deadlock, err = business(ctx, tx, x, y, z)
				return err
			})
			return deadlock, end
		}},
		{"InTx, fn rolls back", func(x, y, z outbox.Envelope) (deadlock, end error) {
			end = store.InTx(t.Context(), func(ctx context.Context, tx *sql.Tx) (err error) {
				if deadlock, err = business(ctx, tx, x, y, z); err != nil {
					return err
				}
				return errRollback
			})
			return deadlock, end
		}},
		{"own transaction, committed", func(x, y, z outbox.Envelope) (deadlock, end error) {
			ctx := t.Context()
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			deadlock, err = business(ctx, tx, x, y, z)
			if err != nil {
				_ = tx.Rollback()
				return deadlock, err
			}
			return deadlock, tx.Commit()
		}},
		{"own transaction, errors ignored", func(x, y, z outbox.Envelope) (deadlock, end error) {
			ctx := t.Context()
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			deadlock, _ = business(ctx, tx, x, y, z)
			_, err = tx.ExecContext(ctx, `DO 1`)
			require.ErrorIs(t, err, sql.ErrTxDone, "a statement after the deadlock")
			return deadlock, tx.Commit()
		}},
	}
	for _, c := range cases {
		x, y, z := goodEnvelope(badInputTopic), goodEnvelope(badInputTopic), goodEnvelope(badInputTopic)
		deadlock, end := c.run(x, y, z)
		var mysqlErr *mysqldriver.MySQLError
		require.ErrorAs(t, deadlock, &mysqlErr, "%s: the write of Y deadlocked", c.name)
		require.EqualValues(t, 1213, mysqlErr.Number, "%s: %v", c.name, deadlock)

		stored := map[string]bool{}
		for name, e := range map[string]outbox.Envelope{"X": x, "Z": z} {
			_, getErr := store.Get(t.Context(), e.ID)
			if getErr != nil {
				require.ErrorIs(t, getErr, outbox.ErrNotFound)
			}
			stored[name] = getErr == nil
		}
		t.Logf("%s: write of Y: %v; end of the transaction: %v; X stored=%v, Z stored=%v",
			c.name, deadlock, end, stored["X"], stored["Z"])
		switch {
		case end == nil && (!stored["X"] || !stored["Z"]):
			t.Errorf("%s: the transaction committed without error after the deadlock, but of its events X is stored=%v, Z stored=%v: "+
				"the deadlock rolled X back, and Z was committed on its own (autocommit)", c.name, stored["X"], stored["Z"])
		case end != nil && (stored["X"] || stored["Z"]):
			t.Errorf("%s: the transaction ended in %q, but of its events X is stored=%v, Z stored=%v: "+
				"Z, written after the deadlock, was committed on its own (autocommit)", c.name, end, stored["X"], stored["Z"])
		}
	}
}

// deadlockWrite writes e in tx with ctx, the business's context, where
// the business transaction already wrote mine, while another transaction
// writes 200 events and e, and then mine: a deadlock, whose victim is tx,
// the transaction with fewer rows. It returns the error of tx's write of
// e.
func deadlockWrite(ctx context.Context, t *testing.T, db *sql.DB, tx *sql.Tx, writer *outbox.Writer[*sql.Tx], e, mine outbox.Envelope) error {
	t.Helper()
	var conn int64
	require.NoError(t, tx.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&conn))

	other, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = other.Rollback() }()
	_, err = writer.Write(ctx, other, goodEnvelopes(200)...)
	require.NoError(t, err)
	_, err = writer.Write(ctx, other, e)
	require.NoError(t, err)

	// tx's write of e waits for other's lock on e's id.
	done := make(chan error, 1)
	go func() {
		_, err := writer.Write(ctx, tx, e)
		done <- err
	}()
	waitFor(t, "the business transaction's insert of e under way", 10*time.Second, func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("the business transaction's write of e returned before the deadlock: %v", err)
		default:
		}
		var inserting int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.processlist
WHERE id = ? AND info LIKE 'INSERT INTO %outbox_event%'`, conn).Scan(&inserting)
		return err == nil && inserting == 1, fmt.Sprint(inserting, " ", err)
	})
	// other's write of mine closes the cycle.
	_, otherErr := writer.Write(ctx, other, mine)
	var writeErr error
	select {
	case writeErr = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the business transaction's write never returned")
	}
	require.NoError(t, otherErr, "the heavier transaction is not the victim")
	require.Error(t, writeErr)
	require.NotErrorIs(t, writeErr, outbox.ErrDuplicateEvent)
	return writeErr
}
