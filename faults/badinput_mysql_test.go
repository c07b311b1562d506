//go:build faults

package faults

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/testmysql"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// The MySQL store splits a batch into statements of at most 1,000 rows
// and about 4 MiB (outbox/mysql's maxInsertRows and maxInsertBytes); when
// a later statement fails, it deletes the rows of the earlier ones again.
const (
	mysqlStatementRows  = 1000
	mysqlStatementBytes = 4 << 20
)

// TestBadEnvelopesWriteNothingMySQL is TestBadEnvelopesWriteNothing on the
// MySQL store, with a relay (hot path and poller) in this process: each
// invalid envelope fails its batch [good, bad, good] with a
// ValidationError and leaves nothing of it in the transaction, which then
// writes one good event and commits; bad Watermill messages fail their
// Publish. MySQL transactions stay usable after a failed statement, so the
// store undoes by itself what a batch split into several statements wrote
// before one failed: such batches (a duplicate event id in the second
// statement, split by rows or by bytes, written through the hot path)
// leave nothing either. Hot-path events written in a savepoint that rolls
// back are not delivered. The relay delivers exactly the good events of
// the committed transactions.
func TestBadEnvelopesWriteNothingMySQL(t *testing.T) {
	t.Parallel()
	db := testmysql.New(t)
	l := newMySQLLedger(t, db, "bad-envelopes-mysql")
	store := openMySQLStore(t, db)
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: sub})
	require.NoError(t, err)
	runRouter(t, sub, l.handler)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	ctx := t.Context()

	// stored counts the rows of ids in tx.
	stored := func(ctx context.Context, tx *sql.Tx, ids []string) int {
		t.Helper()
		var n int
		for chunk := range slices.Chunk(ids, 500) {
			args := make([]any, len(chunk))
			for i, id := range chunk {
				args[i] = id
			}
			var c int
			require.NoError(t, tx.QueryRowContext(ctx, `SELECT count(*) FROM outbox_event WHERE event_id IN (`+
				strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", ")+`)`, args...).Scan(&c))
			n += c
		}
		return n
	}
	// goOn writes one good event in tx, as a business that goes on after
	// a failed write does, and records it in the ledger.
	goOn := func(ctx context.Context, tx *sql.Tx) error {
		good := goodEnvelope(badInputTopic)
		if _, err := writer.Write(ctx, tx, good); err != nil {
			return err
		}
		return recordWrittenMySQL(ctx, tx, []string{good.ID})
	}

	for _, bad := range badEnvelopes {
		require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			batch := badBatch(bad)
			_, err := writer.Write(ctx, tx, batch...)
			requireValidationError(t, err, bad)
			require.Zero(t, stored(ctx, tx, []string{batch[0].ID, batch[2].ID}), "%s: nothing of the batch written", bad.name)
			return goOn(ctx, tx)
		}), bad.name)
	}
	commits := len(badEnvelopes)

	for _, bad := range badMessages {
		err := store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			good := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
			good.SetContext(ctx)
			m := bad.msg()
			m.SetContext(ctx)
			return pub.Publish(badInputTopic, good, m)
		})
		require.ErrorIs(t, err, outbox.ErrInvalidEnvelope, bad.name)
		t.Logf("publish with %s: %v", bad.name, err)
	}

	// Batches the database refuses in their second statement, through the
	// hot path: the duplicate is an event committed before, or one of the
	// batch's own first statement.
	var committed string
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		e := goodEnvelope(badInputTopic)
		committed = e.ID
		if _, err := writer.Write(ctx, tx, e); err != nil {
			return err
		}
		return recordWrittenMySQL(ctx, tx, []string{e.ID})
	}))
	commits++
	splitBatches := []struct {
		name  string
		batch func() []outbox.Envelope
	}{
		{"1,001 events, the last a duplicate of a committed event", func() []outbox.Envelope {
			b := goodEnvelopes(mysqlStatementRows + 1)
			b[mysqlStatementRows].ID = committed
			return b
		}},
		{"1,001 events, the last a duplicate of the first", func() []outbox.Envelope {
			b := goodEnvelopes(mysqlStatementRows + 1)
			b[mysqlStatementRows].ID = b[0].ID
			return b
		}},
		{"6 events of 1 MB, the last a duplicate of a committed event", func() []outbox.Envelope {
			b := goodEnvelopes(6)
			for i := range b {
				b[i].PayloadJSON, b[i].PayloadBytes = nil, make([]byte, 1_000_000)
			}
			// Four fit the first statement, the other two go in a second.
			require.Greater(t, 5*1_000_000, mysqlStatementBytes)
			b[5].ID = committed
			return b
		}},
	}
	var refused []string // ids of the refused batches, committed one excepted
	for _, c := range splitBatches {
		require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			batch := c.batch()
			msgs := make([]*message.Message, len(batch))
			ids := make([]string, 0, len(batch))
			for i, e := range batch {
				payload := e.PayloadJSON
				if payload == nil {
					payload = e.PayloadBytes
				}
				msgs[i] = message.NewMessage(watermill.NewUUID(), payload)
				msgs[i].Metadata.Set(watermilladapter.MetadataEventID, e.ID)
				msgs[i].SetContext(ctx)
				if e.ID != committed && !slices.Contains(ids, e.ID) {
					ids = append(ids, e.ID)
				}
			}
			err := pub.Publish(badInputTopic, msgs...)
			require.ErrorIs(t, err, outbox.ErrDuplicateEvent, c.name)
			var mysqlErr *mysqldriver.MySQLError
			require.ErrorAs(t, err, &mysqlErr, c.name)
			require.EqualValues(t, 1062, mysqlErr.Number, c.name)
			require.Zero(t, stored(ctx, tx, ids), "%s: the first statement's rows are deleted again", c.name)
			refused = append(refused, ids...)
			t.Logf("%s: %.200v", c.name, err)
			return goOn(ctx, tx)
		}), c.name)
		commits++
	}

	// Hot-path events written in a savepoint that rolls back, in a
	// transaction that commits: the store cannot tell, so the writer asks
	// before the commit which are still there (mysql.Store.Kept).
	publish := func(ctx context.Context, n int) ([]string, error) {
		msgs := make([]*message.Message, n)
		ids := make([]string, n)
		for i := range msgs {
			ids[i] = outbox.NewID()
			msgs[i] = message.NewMessage(watermill.NewUUID(), payloadFor(ids[i]))
			msgs[i].Metadata.Set(watermilladapter.MetadataEventID, ids[i])
			msgs[i].SetContext(ctx)
		}
		return ids, pub.Publish(badInputTopic, msgs...)
	}
	var undone []string
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `SAVEPOINT fault_sp`); err != nil {
			return err
		}
		ids, err := publish(ctx, 3)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT fault_sp`); err != nil {
			return err
		}
		undone = ids
		l.rolledBackOnPurpose(ids)
		kept, err := publish(ctx, 2)
		if err != nil {
			return err
		}
		return recordWrittenMySQL(ctx, tx, kept)
	}))
	commits++

	f := l.waitDelivered(t, 30*time.Second)
	st, err := mysqlOutboxState(ctx, db)
	require.NoError(t, err)
	rejected := len(badEnvelopes) + len(badMessages) + len(splitBatches)
	l.report(t, f, 1, rejected+1, fmt.Sprintf("rejected_writes=%d undone_rows=%d savepoint_rollbacks=1", rejected, len(refused)))
	require.Equal(t, int64(len(badEnvelopes)+1+len(splitBatches)+2), f.events, "%d commits", commits)
	require.Zero(t, f.lost, "lost")
	require.Zero(t, f.duplicates, "duplicates")
	require.Zero(t, f.phantom, "nothing of a rejected batch or rolled-back savepoint delivered")
	require.Equal(t, f.events, st.total, "nothing of a rejected batch or rolled-back savepoint stored: %s", st)
	require.Equal(t, f.events, st.done, "%s", st)
	for _, id := range append(refused, undone...) {
		_, err := store.Get(ctx, id)
		require.ErrorIs(t, err, outbox.ErrNotFound, id)
	}
}

func goodEnvelopes(n int) []outbox.Envelope {
	b := make([]outbox.Envelope, n)
	for i := range b {
		b[i] = goodEnvelope(badInputTopic)
	}
	return b
}

// mysqlBadIdentifiers add to badIdentifiers names that attack or strain
// MySQL's rules: backquotes, names of other databases, case, the 48
// characters every dialect allows (MySQL allows 64), the migration table's
// name and the reserved prefixes.
var mysqlBadIdentifiers = []string{
	"outbox_event`; DROP TABLE outbox_event; --",
	"x` (id int); CREATE TABLE pwned (id int); --",
	"outbox_event`",
	"`outbox_event`",
	"mysql.user",
	"information_schema.tables",
	"wmoutbox_migration",
	"OUTBOX_EVENT",
	"outbox_event\t",
	"outbox_event ",
	"outbox_event\\",
	"outbox_event%",
	strings.Repeat("a", 49),
	"sqlite_outbox",
	"pg_outbox",
}

// TestBadTableNamesMySQL is TestBadTableNames on the MySQL store: every
// bad name is refused with mysql.ErrInvalidIdentifier, quoted in the
// message, by NewStore, Migrate and Migrations alike, and the test
// database's catalogue (tables, columns, indexes, views, routines,
// triggers and the migrations recorded) is unchanged after, and so is the
// rest of the server as far as those names reach. The longest name
// allowed (48 characters, whose inbox and index names stay within MySQL's
// 64) is migrated and written to.
func TestBadTableNamesMySQL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := testmysql.New(t)
	queryStrings := func(query string, args ...any) []string {
		t.Helper()
		rows, err := db.QueryContext(ctx, query, args...)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			out = append(out, s)
		}
		require.NoError(t, rows.Err())
		return out
	}
	catalogue := func() []string {
		return queryStrings(`
SELECT concat('table ', table_type, ' ', table_name) FROM information_schema.tables WHERE table_schema = DATABASE()
UNION ALL SELECT concat('column ', table_name, '.', column_name, ' ', column_type) FROM information_schema.columns WHERE table_schema = DATABASE()
UNION ALL SELECT concat('index ', table_name, '.', index_name, '.', seq_in_index, ' ', column_name) FROM information_schema.statistics WHERE table_schema = DATABASE()
UNION ALL SELECT concat('routine ', routine_name) FROM information_schema.routines WHERE routine_schema = DATABASE()
UNION ALL SELECT concat('trigger ', trigger_name) FROM information_schema.triggers WHERE trigger_schema = DATABASE()
UNION ALL SELECT concat('migration ', table_name, ' ', version) FROM wmoutbox_migration
ORDER BY 1`)
	}
	names := append(slices.Clone(badIdentifiers), mysqlBadIdentifiers...)
	// Outside the test databases (the test's own is catalogue's): tables
	// of the bad names or their inboxes, or of the names their injections
	// create, and any table of a database named public.
	elsewhere := func() []string {
		var args []any
		for _, n := range names {
			args = append(args, n, n+"_inbox")
		}
		args = append(args, "pwned", "x")
		return queryStrings(`SELECT concat(table_schema, '.', table_name) FROM information_schema.tables
WHERE table_schema NOT LIKE 'wmoutbox\_mtest\_%' AND (table_name IN (`+
			strings.TrimSuffix(strings.Repeat("?, ", len(args)), ", ")+`) OR table_schema = 'public')
ORDER BY 1`, args...)
	}
	before, elsewhereBefore := catalogue(), elsewhere()
	require.Contains(t, before, "table BASE TABLE outbox_event")

	refused := 0
	for _, name := range names {
		cfg := mysql.Config{Table: name}
		_, err := mysql.NewStore(db, cfg)
		requireBadIdentifier(t, err, mysql.ErrInvalidIdentifier, name)
		requireBadIdentifier(t, mysql.Migrate(ctx, db, cfg), mysql.ErrInvalidIdentifier, name)
		_, err = mysql.Migrations(cfg)
		requireBadIdentifier(t, err, mysql.ErrInvalidIdentifier, name)
		refused += 3
	}
	require.Equal(t, before, catalogue(), "MySQL: nothing created, nothing dropped, no migration recorded")
	require.Equal(t, elsewhereBefore, elsewhere(), "MySQL: no table of a bad name anywhere else on the server")

	// Good custom names work, the longest allowed among them: the refusals
	// above are the rule, not a store that refuses everything.
	for _, name := range []string{"fault_custom_events", strings.Repeat("a", 48)} {
		cfg := mysql.Config{Table: name}
		require.NoError(t, mysql.Migrate(ctx, db, cfg), name)
		require.NoError(t, mysql.Migrate(ctx, db, cfg), "%s: again, a no-op", name)
		store, err := mysql.NewStore(db, cfg)
		require.NoError(t, err)
		writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
		require.NoError(t, err)
		e := goodEnvelope(badInputTopic)
		require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := writer.Write(ctx, tx, e)
			return err
		}))
		got, err := store.Get(ctx, e.ID)
		require.NoError(t, err)
		require.Equal(t, e.ID, got.ID)
	}
	t.Logf("ledger: scenario=bad-table-names-mysql runs=1 faults=%d events=0 lost=0 duplicates=0 phantom=0 refused=%d names=%d",
		refused, refused, len(names))
}

// TestMalformedStoredHeadersMySQL is TestMalformedStoredHeaders on the
// MySQL store, whose headers column is text: besides the JSON that does
// not decode as an object of strings, it holds JSON that does not parse,
// escaped and raw NUL bytes. (Bytes that are not UTF-8 it refuses, in the
// strict mode MariaDB starts in.) Each malformed row goes DEAD at its
// first attempt with the decode error in last_error, without reaching the
// handler; its neighbours, claimed in the same batches, are delivered.
func TestMalformedStoredHeadersMySQL(t *testing.T) {
	t.Parallel()
	db := testmysql.New(t)
	l := newMySQLLedger(t, db, "malformed-headers-mysql")
	store := openMySQLStore(t, db)
	ctx := t.Context()
	malformed := append(slices.Clone(malformedHeaders),
		`{"trace": `, `{"trace": "a\u0000b"}`, "{\"trace\": \"a\x00b\"}", `not json`, `{"a":"b"} trailing`, `{"a":"b",}`)
	var bad, badHeaders []string
	now := time.Now().UnixMicro()
	insert := func(tx *sql.Tx, id, headers string, due int64) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO outbox_event (event_id, event_type, topic, payload, payload_json, headers,
    occurred_at, available_at, created_at, updated_at) VALUES (?, 'FaultTested', ?, ?, 1, ?, ?, ?, ?, ?)`,
			id, badInputTopic, payloadFor(id), headers, now, due, now, now)
		return err
	}
	// Good and malformed rows alternate in due order, so that claims mix them.
	for i, h := range malformed {
		good := []string{outbox.NewID(), outbox.NewID()}
		badID := outbox.NewID()
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		for j, id := range []string{good[0], badID, good[1]} {
			headers := `{"trace": "ok"}`
			if id == badID {
				headers = h
			}
			due := now - int64(100-3*i-j)*int64(time.Millisecond/time.Microsecond)
			require.NoError(t, insert(tx, id, headers, due))
		}
		require.NoError(t, recordWrittenMySQL(ctx, tx, good))
		require.NoError(t, tx.Commit())
		bad, badHeaders = append(bad, badID), append(badHeaders, h)
	}
	// Not UTF-8: the column refuses it.
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	err = insert(tx, outbox.NewID(), "{\"trace\": \"\xff\"}", now)
	var mysqlErr *mysqldriver.MySQLError
	require.ErrorAs(t, err, &mysqlErr, "a headers column that takes bytes that are not UTF-8")
	require.EqualValues(t, 1366, mysqlErr.Number, "incorrect string value: %v", err)
	require.NoError(t, tx.Rollback())

	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{PollInterval: 50 * time.Millisecond, BatchSize: 5})
	require.NoError(t, err)
	runRouter(t, sub, l.handler)
	f := l.waitDelivered(t, 30*time.Second)

	for i, id := range bad {
		e, err := store.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, outbox.StatusDead, e.Status, "headers %q", badHeaders[i])
		require.Equal(t, 1, e.Attempts, "headers %q", badHeaders[i])
		require.Contains(t, e.LastError, "decode headers", "headers %q", badHeaders[i])
		require.Empty(t, e.LockedBy, "headers %q", badHeaders[i])
		t.Logf("headers %-26q → DEAD: %s", badHeaders[i], e.LastError)
	}
	st, err := mysqlOutboxState(ctx, db)
	require.NoError(t, err)
	l.report(t, f, 1, len(bad), fmt.Sprintf("dead=%d", st.dead))
	require.Zero(t, f.lost, "every good neighbour delivered")
	require.Zero(t, f.duplicates, "duplicates")
	require.Zero(t, f.phantom, "no malformed row reached the handler")
	require.Equal(t, int64(len(bad)), st.dead, "%s", st)
	require.Equal(t, f.events, st.done, "%s", st)
	require.Zero(t, st.claimed, "%s", st)
}

// TestPublishWithoutTransactionMySQL is TestPublishWithoutTransaction on
// the MySQL store: writing without a transaction, in every way the API
// allows, fails with ErrNoTransaction (or, for a finished transaction,
// database/sql's sql.ErrTxDone) and writes nothing.
func TestPublishWithoutTransactionMySQL(t *testing.T) {
	t.Parallel()
	db := testmysql.New(t)
	ctx := t.Context()
	store := openMySQLStore(t, db)
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: sub})
	require.NoError(t, err)
	msg := func(ctx context.Context) *message.Message {
		m := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
		m.SetContext(ctx)
		return m
	}
	faults := 0
	noTx := func(what string, err error) {
		t.Helper()
		require.ErrorIs(t, err, outbox.ErrNoTransaction, what)
		faults++
	}

	err = pub.Publish(badInputTopic, msg(ctx))
	noTx("no transaction in the context", err)
	require.ErrorContains(t, err, "call msg.SetContext(ctx) with the context InTx gave")

	// A connection, or the database, in the context is no transaction.
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	noTx("a *sql.Conn in the context", pub.Publish(badInputTopic, msg(outbox.ContextWithTx(ctx, conn))))
	require.NoError(t, conn.Close())
	noTx("a *sql.DB in the context", pub.Publish(badInputTopic, msg(outbox.ContextWithTx(ctx, db))))
	noTx("a nil *sql.Tx in the context", pub.Publish(badInputTopic, msg(outbox.ContextWithTx(ctx, (*sql.Tx)(nil)))))
	noTx("a nil *sql.Tx bound", pub.WithTx(nil).Publish(badInputTopic, msg(ctx)))

	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	_, err = writer.Write(ctx, nil, goodEnvelope(badInputTopic))
	noTx("a nil transaction to the writer", err)

	// Transactions that already ended.
	for _, end := range []string{"commit", "rollback"} {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		if end == "commit" {
			require.NoError(t, tx.Commit())
		} else {
			require.NoError(t, tx.Rollback())
		}
		err = pub.WithTx(tx).Publish(badInputTopic, msg(ctx))
		require.ErrorIs(t, err, sql.ErrTxDone, "after %s", end)
		_, err = writer.Write(ctx, tx, goodEnvelope(badInputTopic))
		require.ErrorIs(t, err, sql.ErrTxDone, "after %s", end)
		faults += 2
	}
	// A transaction whose context ended: database/sql rolls it back.
	txCtx, cancel := context.WithCancel(ctx)
	tx, err := db.BeginTx(txCtx, nil)
	require.NoError(t, err)
	cancel()
	_, err = writer.Write(txCtx, tx, goodEnvelope(badInputTopic))
	require.Error(t, err, "a transaction whose context ended")
	require.True(t, errors.Is(err, context.Canceled) || errors.Is(err, sql.ErrTxDone), "%v", err)
	faults++

	st, err := mysqlOutboxState(ctx, db)
	require.NoError(t, err)
	require.Zero(t, st.total, "nothing written")
	t.Logf("ledger: scenario=no-transaction-mysql runs=1 faults=%d events=0 lost=0 duplicates=0 phantom=0 written=0", faults)
}
