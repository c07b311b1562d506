//go:build faults

package faults

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

const badInputTopic = "bad-input"

// badEnvelope is an invalid envelope and what its error must say.
type badEnvelope struct {
	name   string
	change func(e *outbox.Envelope)
	field  string // ValidationError.Field
	reason string // in ValidationError.Reason
}

var badEnvelopes = []badEnvelope{
	{"payload over 1 MiB", func(e *outbox.Envelope) { e.PayloadJSON, e.PayloadBytes = nil, make([]byte, outbox.MaxPayloadSize+1) },
		"PayloadBytes", "exceeds the limit of 1048576"},
	{"JSON payload over 1 MiB", func(e *outbox.Envelope) {
		e.PayloadJSON = []byte(`"` + strings.Repeat("a", outbox.MaxPayloadSize) + `"`)
	}, "PayloadJSON", "exceeds the limit"},
	{"invalid JSON", func(e *outbox.Envelope) { e.PayloadJSON = []byte(`{"order": 1,`) }, "PayloadJSON", "not valid JSON"},
	{"JSON with trailing garbage", func(e *outbox.Envelope) { e.PayloadJSON = []byte(`{} {}`) }, "PayloadJSON", "not valid JSON"},
	{"no payload", func(e *outbox.Envelope) { e.PayloadJSON = nil }, "PayloadJSON", "set one of"},
	{"two payloads", func(e *outbox.Envelope) { e.PayloadBytes = []byte("x") }, "PayloadBytes", "set only one"},
	{"no type", func(e *outbox.Envelope) { e.Type = "" }, "Type", "required"},
	{"NUL in the type", func(e *outbox.Envelope) { e.Type = "Order\x00Created" }, "Type", "NUL"},
	{"NUL in the topic", func(e *outbox.Envelope) { e.Topic = "orders\x00" }, "Topic", "NUL"},
	{"NUL in the aggregate type", func(e *outbox.Envelope) { e.AggregateType = "Order\x00" }, "AggregateType", "NUL"},
	{"NUL in the aggregate id", func(e *outbox.Envelope) { e.AggregateID = "order-\x001" }, "AggregateID", "NUL"},
	{"NUL in the tenant id", func(e *outbox.Envelope) { e.TenantID = "\x00" }, "TenantID", "NUL"},
	{"NUL in the event id", func(e *outbox.Envelope) { e.ID = "01J\x00" }, "ID", "NUL"},
	{"NUL in a header key", func(e *outbox.Envelope) { e.Headers = map[string]string{"trace\x00": "1"} }, "Headers", "NUL"},
	{"NUL in a header value", func(e *outbox.Envelope) { e.Headers = map[string]string{"trace": "1\x00"} }, "Headers", "NUL"},
	{"empty header key", func(e *outbox.Envelope) { e.Headers = map[string]string{"": "1"} }, "Headers", "empty"},
	{"invalid UTF-8 in the aggregate id", func(e *outbox.Envelope) { e.AggregateID = "order-\xff" }, "AggregateID", "UTF-8"},
	{"over-long event id", func(e *outbox.Envelope) { e.ID = strings.Repeat("a", outbox.MaxEventIDLen+1) }, "ID", "longer than 36"},
	{"over-long type", func(e *outbox.Envelope) { e.Type = outbox.EventType(strings.Repeat("T", 129)) }, "Type", "longer than"},
	{"over-long topic", func(e *outbox.Envelope) { e.Topic = strings.Repeat("t", 256) }, "Topic", "longer than"},
	{"over-long aggregate type", func(e *outbox.Envelope) {
		e.AggregateType = outbox.AggregateType(strings.Repeat("A", 65))
	}, "AggregateType", "longer than"},
	{"over-long aggregate id", func(e *outbox.Envelope) { e.AggregateID = strings.Repeat("é", 129) }, "AggregateID", "longer than"},
	{"over-long tenant id", func(e *outbox.Envelope) { e.TenantID = strings.Repeat("t", 65) }, "TenantID", "longer than"},
}

// badMessages are Watermill messages whose metadata or payload make
// invalid envelopes.
var badMessages = []struct {
	name string
	msg  func() *message.Message
}{
	{"NUL in the aggregate id", func() *message.Message {
		m := message.NewMessage(watermill.NewUUID(), []byte("x"))
		m.Metadata.Set(watermilladapter.MetadataAggregateID, "a\x00")
		return m
	}},
	{"unparsable deliver-after time", func() *message.Message {
		m := message.NewMessage(watermill.NewUUID(), []byte("x"))
		m.Metadata.Set(watermilladapter.MetadataDeliverAfter, "tomorrow")
		return m
	}},
	{"payload over 1 MiB", func() *message.Message {
		return message.NewMessage(watermill.NewUUID(), make([]byte, outbox.MaxPayloadSize+1))
	}},
	{"over-long event id", func() *message.Message {
		m := message.NewMessage(watermill.NewUUID(), []byte("x"))
		m.Metadata.Set(watermilladapter.MetadataEventID, strings.Repeat("1", 37))
		return m
	}},
}

// badBatch is [good, bad, good].
func badBatch(bad badEnvelope) []outbox.Envelope {
	e := goodEnvelope(badInputTopic)
	bad.change(&e)
	return []outbox.Envelope{goodEnvelope(badInputTopic), e, goodEnvelope(badInputTopic)}
}

func goodEnvelope(topic string) outbox.Envelope {
	id := outbox.NewID()
	return outbox.Envelope{ID: id, Type: faultTested, Topic: topic, PayloadJSON: payloadFor(id)}
}

// TestBadEnvelopesWriteNothing writes, for each kind of invalid envelope,
// a batch of [good, bad, good] in a business transaction on PostgreSQL:
// the write fails with a ValidationError naming the envelope, the field
// and the reason, and leaves nothing of the batch in the transaction,
// which then writes one good event and commits. A relay delivers exactly
// those good events: none of the rejected batches' good neighbours.
func TestBadEnvelopesWriteNothing(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	l := newLedger(t, pool, "bad-envelopes")
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{PollInterval: 50 * time.Millisecond},
		relaytest.Handlers{badInputTopic: l.handler})
	writer, err := outbox.NewWriter(r.Store, outbox.WriterConfig{})
	require.NoError(t, err)
	ctx := t.Context()

	for _, bad := range badEnvelopes {
		require.NoError(t, r.Store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			batch := badBatch(bad)
			_, err := writer.Write(ctx, tx, batch...)
			requireValidationError(t, err, bad)
			var rows int
			// The good neighbours' ids: the bad one may not even be a
			// string PostgreSQL takes as a parameter.
			require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM outbox_event WHERE event_id = ANY($1)`,
				[]string{batch[0].ID, batch[2].ID}).Scan(&rows))
			require.Zero(t, rows, "%s: nothing of the batch written", bad.name)

			// The transaction is still usable: the business decides to go on.
			good := goodEnvelope(badInputTopic)
			if _, err := writer.Write(ctx, tx, good); err != nil {
				return err
			}
			return recordWritten(ctx, tx, []string{good.ID})
		}), bad.name)
	}

	// Bad metadata through the Watermill publisher fails the same way.
	for _, bad := range badMessages {
		err := r.Store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			good := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
			return r.Pub.WithTx(tx).Publish(badInputTopic, good, bad.msg())
		})
		require.ErrorIs(t, err, outbox.ErrInvalidEnvelope, bad.name)
		t.Logf("publish with %s: %v", bad.name, err)
	}

	f := l.waitDelivered(t, 30*time.Second)
	st, err := outboxState(ctx, pool)
	require.NoError(t, err)
	l.report(t, f, 1, len(badEnvelopes)+len(badMessages), fmt.Sprintf("rejected_writes=%d", len(badEnvelopes)+len(badMessages)))
	require.Equal(t, int64(len(badEnvelopes)), f.events)
	require.Zero(t, f.lost, "lost")
	require.Zero(t, f.duplicates, "duplicates")
	require.Zero(t, f.phantom, "nothing of a rejected batch delivered")
	require.Equal(t, f.events, st.total, "nothing of a rejected batch stored: %s", st)
}

// TestBadEnvelopesWriteNothingSQLite is the same check on the embedded
// store: the batch fails whole, and the transaction stays usable.
func TestBadEnvelopesWriteNothingSQLite(t *testing.T) {
	t.Parallel()
	db, store := openSQLite(t)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	ctx := t.Context()
	var written []string
	for _, bad := range badEnvelopes {
		require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			batch := badBatch(bad)
			_, err := writer.Write(ctx, tx, batch...)
			requireValidationError(t, err, bad)
			var rows int
			require.NoError(t, tx.QueryRowContext(ctx, `SELECT count(*) FROM outbox_event`).Scan(&rows))
			rows -= len(written)
			require.Zero(t, rows, "%s: nothing of the batch written", bad.name)
			good := goodEnvelope(badInputTopic)
			_, err = writer.Write(ctx, tx, good)
			written = append(written, good.ID)
			return err
		}), bad.name)
	}
	var stored []string
	rows, err := db.QueryContext(ctx, `SELECT event_id FROM outbox_event ORDER BY event_id`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		stored = append(stored, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, written, stored, "exactly the good events of the committed transactions")
}

func requireValidationError(t *testing.T, err error, bad badEnvelope) {
	t.Helper()
	var verr *outbox.ValidationError
	require.ErrorAs(t, err, &verr, bad.name)
	require.ErrorIs(t, err, outbox.ErrInvalidEnvelope, bad.name)
	require.Equal(t, 1, verr.Index, "%s: the error names the envelope of the batch", bad.name)
	require.Equal(t, bad.field, verr.Field, bad.name)
	require.Contains(t, verr.Reason, bad.reason, bad.name)
	require.Less(t, len(err.Error()), 300, "%s: a short message, not the payload: %.300s", bad.name, err)
}

// badIdentifiers are table and schema names a configuration could carry:
// injection attempts and names that quote, fold or truncate. (An empty
// name is not among them: it means the default.)
var badIdentifiers = []string{
	`outbox_event; DROP TABLE outbox_event; --`,
	`outbox_event"; DROP TABLE outbox_event; --`,
	`x" (id int); CREATE TABLE pwned (id int); --`,
	`outbox_event' OR '1'='1`,
	`"outbox_event"`,
	`public.outbox_event`,
	`Outbox`,
	`1outbox`,
	`outbox event`,
	`outbox_event--`,
	`outbox_event/*`,
	"outbox_event\x00",
	"outbox_event\n",
	`événement`,
	strings.Repeat("a", 64),
}

// TestBadTableNames configures both stores with injection attempts as
// table and schema names: each is refused with ErrInvalidIdentifier and a
// message quoting the name and the rule, by NewStore, Migrate and
// Migrations alike, and the databases' catalogues are unchanged after.
func TestBadTableNames(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)
	pgCatalogue := func() []string {
		rows, err := pool.Query(ctx, `SELECT n.nspname || '.' || c.relname FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
UNION ALL SELECT nspname FROM pg_namespace ORDER BY 1`)
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return names
	}
	db, _ := openSQLite(t)
	sqliteCatalogue := func() []string {
		rows, err := db.QueryContext(ctx, `SELECT type || ' ' || name FROM sqlite_master ORDER BY 1`)
		require.NoError(t, err)
		defer rows.Close()
		var names []string
		for rows.Next() {
			var n string
			require.NoError(t, rows.Scan(&n))
			names = append(names, n)
		}
		require.NoError(t, rows.Err())
		return names
	}
	pgBefore, sqliteBefore := pgCatalogue(), sqliteCatalogue()

	refused := 0
	for _, name := range badIdentifiers {
		for _, cfg := range []postgres.Config{{Table: name}, {Schema: name}} {
			_, err := postgres.NewStore(pool, cfg)
			requireBadIdentifier(t, err, postgres.ErrInvalidIdentifier, name)
			requireBadIdentifier(t, postgres.Migrate(ctx, pool, cfg), postgres.ErrInvalidIdentifier, name)
			_, err = postgres.Migrations(cfg)
			requireBadIdentifier(t, err, postgres.ErrInvalidIdentifier, name)
			refused += 3
		}
		cfg := sqlite.Config{Table: name}
		_, err := sqlite.NewStore(db, cfg)
		requireBadIdentifier(t, err, sqlite.ErrInvalidIdentifier, name)
		requireBadIdentifier(t, sqlite.Migrate(ctx, db, cfg), sqlite.ErrInvalidIdentifier, name)
		_, err = sqlite.Migrations(cfg)
		requireBadIdentifier(t, err, sqlite.ErrInvalidIdentifier, name)
		refused += 3
	}
	require.Equal(t, pgBefore, pgCatalogue(), "PostgreSQL: nothing created, nothing dropped")
	require.Equal(t, sqliteBefore, sqliteCatalogue(), "SQLite: nothing created, nothing dropped")

	// A good custom name works: the refusals above are the rule, not a
	// store that refuses everything.
	cfg := postgres.Config{Table: "fault_custom_events"}
	require.NoError(t, postgres.Migrate(ctx, pool, cfg))
	store, err := postgres.NewStore(pool, cfg)
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)
	e := goodEnvelope(badInputTopic)
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := writer.Write(ctx, tx, e)
		return err
	}))
	got, err := store.Get(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, e.ID, got.ID)
	t.Logf("ledger: scenario=bad-table-names runs=1 faults=%d events=0 lost=0 duplicates=0 phantom=0 refused=%d names=%d",
		refused, refused, len(badIdentifiers))
}

func requireBadIdentifier(t *testing.T, err, sentinel error, name string) {
	t.Helper()
	require.ErrorIs(t, err, sentinel, "%q", name)
	require.Contains(t, err.Error(), fmt.Sprintf("%q", name), "the error quotes the name")
}

// malformedHeaders are headers a row can hold in PostgreSQL's jsonb
// column that do not decode as a JSON object of strings.
var malformedHeaders = []string{
	`[1, 2]`,
	`"a string"`,
	`42`,
	`true`,
	`{"attempt": 1}`,
	`{"nested": {"a": "b"}}`,
	`{"": "empty key"}`,
}

// TestMalformedStoredHeaders stores rows whose headers cannot be decoded
// (as a bug, a manual fix or another writer could) among good rows, with
// SQL, and runs a relay: each malformed row goes DEAD at its first
// attempt with the decode error in last_error, without reaching the
// handler; its neighbours, claimed in the same batches, are delivered.
func TestMalformedStoredHeaders(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	l := newLedger(t, pool, "malformed-headers")
	ctx := t.Context()
	// Good and malformed rows alternate in due order, so that claims mix them.
	var bad []string
	for i, h := range malformedHeaders {
		good := []string{outbox.NewID(), outbox.NewID()}
		badID := outbox.NewID()
		bad = append(bad, badID)
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		for j, id := range []string{good[0], badID, good[1]} {
			headers := `{"trace": "ok"}`
			if id == badID {
				headers = h
			}
			_, err := tx.Exec(ctx, `INSERT INTO outbox_event (event_id, event_type, topic, payload, payload_json, headers,
    occurred_at, available_at, created_at, updated_at)
VALUES ($1, 'FaultTested', $2, $3, true, $4::jsonb, now(), now() - make_interval(secs => $5), now(), now())`,
				id, badInputTopic, payloadFor(id), headers, float64(100-3*i-j))
			require.NoError(t, err)
		}
		require.NoError(t, recordWritten(ctx, tx, good))
		require.NoError(t, tx.Commit(ctx))
	}

	relaytest.Start(t, pool, watermilladapter.SubscriberConfig{PollInterval: 50 * time.Millisecond, BatchSize: 5},
		relaytest.Handlers{badInputTopic: l.handler})
	f := l.waitDelivered(t, 30*time.Second)

	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	for i, id := range bad {
		e, err := store.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, outbox.StatusDead, e.Status, "headers %s", malformedHeaders[i])
		require.Equal(t, 1, e.Attempts, "headers %s", malformedHeaders[i])
		require.Contains(t, e.LastError, "decode headers", "headers %s", malformedHeaders[i])
		t.Logf("headers %-24s → DEAD: %s", malformedHeaders[i], e.LastError)
	}
	st, err := outboxState(ctx, pool)
	require.NoError(t, err)
	l.report(t, f, 1, len(bad), fmt.Sprintf("dead=%d", st.dead))
	require.Zero(t, f.lost, "every good neighbour delivered")
	require.Zero(t, f.duplicates, "duplicates")
	require.Zero(t, f.phantom, "no malformed row reached the handler")
	require.Equal(t, int64(len(bad)), st.dead, "%s", st)
	require.Equal(t, f.events, st.done, "%s", st)
}

// TestMalformedStoredHeadersSQLite is the same on the embedded store,
// whose TEXT column holds even more: JSON that does not parse, escaped
// NUL bytes, invalid UTF-8.
func TestMalformedStoredHeadersSQLite(t *testing.T) {
	t.Parallel()
	db, store := openSQLite(t)
	ctx := t.Context()
	malformed := append(slices.Clone(malformedHeaders),
		`{"trace": `, `{"trace": "a\u0000b"}`, `not json`, `{"a":"b"} trailing`)
	var good, bad []string
	now := time.Now().UnixMicro()
	for i, h := range malformed {
		ids := []string{outbox.NewID(), outbox.NewID(), outbox.NewID()}
		for j, id := range ids {
			headers := `{"trace": "ok"}`
			if j == 1 {
				headers = h
				bad = append(bad, id)
			} else {
				good = append(good, id)
			}
			due := now - int64(100-3*i-j)*int64(time.Millisecond/time.Microsecond)
			_, err := db.ExecContext(ctx, `INSERT INTO outbox_event (event_id, event_type, topic, payload, payload_json, headers,
    occurred_at, available_at, created_at, updated_at) VALUES (?, 'FaultTested', ?, ?, 1, ?, ?, ?, ?, ?)`,
				id, badInputTopic, payloadFor(id), headers, now, due, now, now)
			require.NoError(t, err)
		}
	}

	var (
		mu        sync.Mutex
		delivered []string
	)
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{PollInterval: 50 * time.Millisecond, BatchSize: 5})
	require.NoError(t, err)
	runRouter(t, sub, func(msg *message.Message) error {
		mu.Lock()
		delivered = append(delivered, msg.Metadata.Get(watermilladapter.MetadataEventID))
		mu.Unlock()
		return nil
	})
	waitFor(t, "every row settled", 30*time.Second, func() (bool, string) {
		var pending int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM outbox_event WHERE status IN (0, 2)`).Scan(&pending)
		return err == nil && pending == 0, fmt.Sprint(pending, err)
	})
	for i, id := range bad {
		e, err := store.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, outbox.StatusDead, e.Status, "headers %q", malformed[i])
		require.Contains(t, e.LastError, "decode headers", "headers %q", malformed[i])
	}
	mu.Lock()
	got := slices.Sorted(slices.Values(delivered))
	mu.Unlock()
	require.Equal(t, slices.Sorted(slices.Values(good)), got, "each good row delivered once, no malformed one")
	t.Logf("ledger: scenario=malformed-headers-sqlite runs=1 faults=%d events=%d lost=0 duplicates=0 phantom=0 dead=%d",
		len(bad), len(good), len(bad))
}

// TestPublishWithoutTransaction writes without a transaction in every way
// the API allows: each fails with ErrNoTransaction (or, for a finished
// transaction, the driver's error) and writes nothing.
func TestPublishWithoutTransaction(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := t.Context()
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{}, nil)
	msg := func() *message.Message { return message.NewMessage(watermill.NewUUID(), []byte(`{}`)) }

	err := r.Pub.Publish(badInputTopic, msg())
	require.ErrorIs(t, err, outbox.ErrNoTransaction)
	require.ErrorContains(t, err, "call msg.SetContext(ctx) with the context InTx gave")

	// A context carrying a transaction of another driver is no transaction.
	db, sqliteStore := openSQLite(t)
	sqlTx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	m := msg()
	m.SetContext(outbox.ContextWithTx(ctx, sqlTx))
	require.ErrorIs(t, r.Pub.Publish(badInputTopic, m), outbox.ErrNoTransaction)
	require.NoError(t, sqlTx.Rollback())

	writer, err := outbox.NewWriter(r.Store, outbox.WriterConfig{})
	require.NoError(t, err)
	_, err = writer.Write(ctx, nil, goodEnvelope(badInputTopic))
	require.ErrorIs(t, err, outbox.ErrNoTransaction)
	sqliteWriter, err := outbox.NewWriter(sqliteStore, outbox.WriterConfig{})
	require.NoError(t, err)
	_, err = sqliteWriter.Write(ctx, nil, goodEnvelope(badInputTopic))
	require.ErrorIs(t, err, outbox.ErrNoTransaction)

	// A transaction that already ended.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	err = r.Pub.WithTx(tx).Publish(badInputTopic, msg())
	require.ErrorIs(t, err, pgx.ErrTxClosed)

	requireEmpty(t, pool)
	var rows int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM outbox_event`).Scan(&rows))
	require.Zero(t, rows)
	t.Logf("ledger: scenario=no-transaction runs=1 faults=5 events=0 lost=0 duplicates=0 phantom=0 written=0")
}

func requireEmpty(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	st, err := outboxState(t.Context(), pool)
	require.NoError(t, err)
	require.Zero(t, st.total, "nothing written")
}

// openSQLite opens a migrated SQLite database of the test's own.
func openSQLite(t *testing.T) (*sql.DB, *sqlite.Store) {
	t.Helper()
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "outbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	require.NoError(t, sqlite.Migrate(t.Context(), db, sqlite.Config{}))
	store, err := sqlite.NewStore(db, sqlite.Config{})
	require.NoError(t, err)
	return db, store
}

// runRouter runs h on sub's badInputTopic behind RecordErrors until the
// test ends.
func runRouter(t *testing.T, sub *watermilladapter.Subscriber, h message.NoPublishHandlerFunc) {
	t.Helper()
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(outboxmw.RecordErrors)
	router.AddConsumerHandler("handle", badInputTopic, sub, h)
	done := make(chan error, 1)
	go func() { done <- router.Run(context.Background()) }()
	t.Cleanup(func() {
		require.NoError(t, router.Close())
		require.NoError(t, <-done)
		require.NoError(t, sub.Close())
	})
	select {
	case <-router.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	}
}

// TestMalformedHeadersThatDecode guards the header decoder against
// encoding/json's leniency. Anything but a JSON object of string values is
// malformed, and a malformed row goes DEAD with the decode error. Two such
// rows would decode with encoding/json alone, and be delivered with
// headers nobody wrote:
//
//   - {"trace": null} (both stores): null leaves the string untouched, so
//     the header arrives as "";
//   - a value with bytes that are not UTF-8 (SQLite's TEXT column takes
//     them; PostgreSQL's jsonb refuses them): they arrive replaced by
//     U+FFFD.
func TestMalformedHeadersThatDecode(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)
	pgStore, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	db, sqliteStore := openSQLite(t)

	type stored struct{ store, headers string }
	cases := []stored{{"postgres", `{"trace": null}`}, {"sqlite", `{"trace": null}`}, {"sqlite", "{\"trace\": \"\xff\"}"}}
	var failures []string
	for _, c := range cases {
		id := outbox.NewID()
		var e outbox.Event
		if c.store == "postgres" {
			_, err := pool.Exec(ctx, `INSERT INTO outbox_event (event_id, event_type, topic, payload, headers,
    occurred_at, available_at, created_at, updated_at)
VALUES ($1, 'FaultTested', $2, '\x00', $3::jsonb, now(), now(), now(), now())`, id, badInputTopic, c.headers)
			require.NoError(t, err)
			e, err = pgStore.Get(ctx, id)
			require.NoError(t, err)
		} else {
			now := time.Now().UnixMicro()
			_, err := db.ExecContext(ctx, `INSERT INTO outbox_event (event_id, event_type, topic, payload, headers,
    occurred_at, available_at, created_at, updated_at) VALUES (?, 'FaultTested', ?, x'00', ?, ?, ?, ?, ?)`,
				id, badInputTopic, c.headers, now, now, now, now)
			require.NoError(t, err)
			e, err = sqliteStore.Get(ctx, id)
			require.NoError(t, err)
		}
		if e.Malformed == nil {
			failures = append(failures, fmt.Sprintf("%s: stored headers %q decoded as %q, not as malformed", c.store, c.headers, e.Headers))
		}
	}
	require.Empty(t, failures)
}
