package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/bytesize"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/internal/testmysql"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
)

// migratedDialects are the dialects with a function making the URL of a
// migrated database.
var migratedDialects = []struct {
	name     string
	migrated func(t *testing.T) string
}{
	{dialectPostgres, func(t *testing.T) string { return testdb.URL(t) }},
	{dialectMySQL, func(t *testing.T) string { return "mysql://" + testmysql.DSN(t) }},
	{dialectSQLite, func(t *testing.T) string {
		url := "sqlite:" + filepath.Join(t.TempDir(), "outbox.db")
		ok(t, "migrate", "up", "--database-url", url)
		return url
	}},
}

// forEachDialect runs test on a migrated database of every dialect, in
// parallel.
func forEachDialect(t *testing.T, test func(t *testing.T, url string)) {
	t.Helper()
	for _, d := range migratedDialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			test(t, d.migrated(t))
		})
	}
}

// seedEvent is an event to write, and what then becomes of it.
type seedEvent struct {
	topic, aggregateID string
	status             outbox.Status // NEW (written), RETRY (due since age ago), DONE or DEAD
	age                time.Duration // how long ago it became DONE, DEAD or due
	err, group         string        // DEAD: the last error and its group
	payload            []byte        // default {"n":1}, JSON
}

// seed writes events to the outbox table of url through the dialect's
// store and returns their ids, in order.
func seed(t *testing.T, url string, events ...seedEvent) []string {
	t.Helper()
	c := &cli{getenv: func(string) string { return "" }, globals: globals{databaseURL: url, table: defaultTable}}
	d, err := c.openMigrated(t.Context())
	require.NoError(t, err)
	defer d.close()
	switch d.dialect {
	case dialectPostgres:
		s, err := postgres.NewStore(d.pool, d.postgres)
		require.NoError(t, err)
		return seedStore(t, s, events)
	case dialectMySQL:
		s, err := mysql.NewStore(d.db, d.mysql)
		require.NoError(t, err)
		return seedStore(t, s, events)
	default:
		s, err := sqlite.NewStore(d.db, d.sqlite)
		require.NoError(t, err)
		return seedStore(t, s, events)
	}
}

func seedStore[Tx any](t *testing.T, s *outbox.Store[Tx], events []seedEvent) []string {
	t.Helper()
	ctx := t.Context()
	w, err := outbox.NewWriter(s, outbox.WriterConfig{})
	require.NoError(t, err)
	envelopes := make([]outbox.Envelope, len(events))
	for i, e := range events {
		env := outbox.Envelope{Type: "order.placed", Topic: e.topic, AggregateType: "order", AggregateID: e.aggregateID,
			Headers: map[string]string{"trace": "t-1"}}
		switch {
		case e.payload == nil:
			env.PayloadJSON = []byte(`{"n":1,"items":["a"]}`)
		case json.Valid(e.payload):
			env.PayloadJSON = e.payload
		default:
			env.PayloadBytes = e.payload
		}
		envelopes[i] = env
	}
	var ids []string
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx Tx) error {
		ids, err = w.Write(ctx, tx, envelopes...)
		return err
	}))
	now := time.Now()
	for i, e := range events {
		at := now.Add(-e.age)
		switch e.status {
		case outbox.StatusDone:
			_, err = s.Driver().MarkDone(ctx, outboxdriver.MarkDoneParams{Now: at, IDs: ids[i : i+1]})
		case outbox.StatusDead:
			_, err = s.Driver().RecordOutcomes(ctx, outboxdriver.RecordOutcomesParams{Now: at, Outcomes: []outboxdriver.Outcome{{
				ID: ids[i], Status: int16(outbox.StatusDead), AttemptSpent: true, Error: e.err, ErrorGroup: e.group,
			}}})
		case outbox.StatusRetry:
			_, err = s.Driver().RecordOutcomes(ctx, outboxdriver.RecordOutcomesParams{Now: now, Outcomes: []outboxdriver.Outcome{{
				ID: ids[i], Status: int16(outbox.StatusRetry), AttemptSpent: true, NextAt: at, Error: "timeout",
			}}})
		}
		require.NoError(t, err)
	}
	return ids
}

// claim leases one due event of topic to owner.
func claim(t *testing.T, url, owner, topic string) {
	t.Helper()
	now := time.Now()
	p := &outboxdriver.ClaimParams{Owner: owner, Topic: topic, Now: now, CreatedBefore: now.Add(time.Second), LockedUntil: now.Add(time.Hour), Limit: 1}
	rows, err := executor(t, url).Claim(t.Context(), p)
	require.NoError(t, err)
	require.Len(t, rows, 1)
}

// heartbeat writes relay owner's heartbeat, expiring at until.
func heartbeat(t *testing.T, url, owner string, until time.Time) {
	t.Helper()
	_, err := executor(t, url).Heartbeat(t.Context(), outboxdriver.HeartbeatParams{Owner: owner, Until: until})
	require.NoError(t, err)
}

// executor returns the driver of the store at url, closed with the test.
func executor(t *testing.T, url string) outboxdriver.Executor {
	t.Helper()
	c := &cli{getenv: func(string) string { return "" }, globals: globals{databaseURL: url, table: defaultTable}}
	d, err := c.openMigrated(t.Context())
	require.NoError(t, err)
	t.Cleanup(d.close)
	switch d.dialect {
	case dialectPostgres:
		s, err := postgres.NewStore(d.pool, d.postgres)
		require.NoError(t, err)
		return s.Driver()
	case dialectMySQL:
		s, err := mysql.NewStore(d.db, d.mysql)
		require.NoError(t, err)
		return s.Driver()
	default:
		s, err := sqlite.NewStore(d.db, d.sqlite)
		require.NoError(t, err)
		return s.Driver()
	}
}

const (
	groupDecode = "a1b2c3d4e5f60708"
	groupHTTP   = "0f0e0d0c0b0a0908"
)

// deadSeed is the events most tests use: on orders two NEW, one DONE, two
// DEAD (decode errors); on payments one DEAD (an HTTP error).
var deadSeed = []seedEvent{
	{topic: "orders", aggregateID: "1"},
	{topic: "orders", aggregateID: "2"},
	{topic: "orders", aggregateID: "3", status: outbox.StatusDone},
	{topic: "orders", aggregateID: "4", status: outbox.StatusDead, age: time.Hour, err: "decode order 4: unexpected EOF", group: groupDecode},
	{topic: "orders", aggregateID: "5", status: outbox.StatusDead, age: time.Minute, err: "decode order 5: unexpected EOF", group: groupDecode},
	{topic: "payments", aggregateID: "6", status: outbox.StatusDead, age: time.Minute, err: "POST /charge: 503 Service Unavailable", group: groupHTTP, payload: []byte{0xde, 0xad, 0xbe, 0xef}},
}

// runIn runs args with stdin, a terminal or not, and the database url.
func runIn(t *testing.T, stdin string, terminal bool, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	c := &cli{stdin: strings.NewReader(stdin), stdout: &stdout, stderr: &stderr,
		getenv: func(string) string { return "" }, terminal: func() bool { return terminal }}
	code := c.run(t.Context(), args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func TestStats(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, url string) {
		seed(t, url, deadSeed...)
		claim(t, url, "relay-1", "orders")
		heartbeat(t, url, "relay-1", time.Now().Add(time.Hour))
		heartbeat(t, url, "relay-0", time.Now().Add(-time.Minute))

		out := ok(t, "stats", "--database-url", url)
		require.Contains(t, out, "TOPIC")
		require.Regexp(t, `orders\s+2\s+0\s+1\s+2\s`, out) // a claimed event is NEW
		require.Regexp(t, `relay-1\s+orders\s+1\s`, out)
		require.Regexp(t, `relay-0\s+\S+\s+dead: claims handed back`, out)
		require.Regexp(t, `relay-1\s+\S+\s+alive`, out)
		require.Regexp(t, groupDecode+`\s+2\s`, out)
		require.Contains(t, out, "decode order <n>")
		require.NotContains(t, out, "LOG SLOT", "no slot, no table")

		var st statsJSON
		require.NoError(t, json.Unmarshal([]byte(ok(t, "stats", "--json", "--database-url", url)), &st))
		require.Equal(t, int64(3), st.Dead)
		require.Len(t, st.Topics, 2)
		require.Equal(t, topicStatsJSON{Topic: "payments", Dead: 1}, st.Topics[1])
		require.Equal(t, "orders", st.Topics[0].Topic)
		require.Equal(t, int64(2), st.Topics[0].New)
		require.Len(t, st.Claims, 1)
		require.Equal(t, "relay-1", st.Claims[0].Owner)
		require.Len(t, st.Relays, 2)
		require.Equal(t, relayJSON{Owner: "relay-0", Until: st.Relays[0].Until, Alive: false}, st.Relays[0])
		require.True(t, st.Relays[1].Alive)
		require.NotNil(t, st.Slots)
		require.Empty(t, st.Slots)
		require.Len(t, st.DeadGroups, 2)
		require.Equal(t, groupDecode, st.DeadGroups[0].Group)
		require.Equal(t, int64(2), st.DeadGroups[0].Count)
		require.Empty(t, st.Failed)

		r := wmoutbox(t, nil, "stats", "--database-url", url, "--fail-if-dead", "3", "--json")
		require.Equal(t, exitFound, r.code, r.stderr)
		require.Contains(t, r.stderr, "3 DEAD events (--fail-if-dead 3)")
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
		require.Equal(t, []string{"fail-if-dead"}, st.Failed)
		require.Equal(t, exitOK, wmoutbox(t, nil, "stats", "--database-url", url, "--fail-if-dead", "4").code)
		require.Equal(t, exitOK, wmoutbox(t, nil, "stats", "--database-url", url, "--fail-if-oldest", "1h").code)

		// A RETRY event due for two hours.
		seed(t, url, seedEvent{topic: "late", status: outbox.StatusRetry, age: 2 * time.Hour})
		r = wmoutbox(t, nil, "stats", "--database-url", url, "--fail-if-oldest", "1h")
		require.Equal(t, exitFound, r.code, r.stderr)
		require.Contains(t, r.stderr, "(--fail-if-oldest 1h)")
		require.Regexp(t, `late\s+0\s+1\s+0\s+0\s+2h0m`, r.stdout)
	})
}

// On PostgreSQL, stats lists the database's log slots: the log each holds
// back, and who confirmed a position in it how long ago; serve's /metrics
// exports them as the relays do.
func TestStatsLogSlots(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	slot := testdb.LogicalSlot(t, url)
	seed(t, url, seedEvent{topic: "orders"}) // log written after the slot's position
	confirmed := time.Now().Add(-2 * time.Minute)
	held, err := executor(t, url).AcquireLease(t.Context(), outboxdriver.LeaseParams{Name: outboxdriver.SlotLeasePrefix + slot,
		Owner: "relay-1", Now: confirmed, Until: confirmed})
	require.NoError(t, err)
	require.True(t, held)

	out := ok(t, "stats", "--database-url", url)
	require.Regexp(t, `LOG SLOT\s+ACTIVE\s+LAG\s+LAG BYTES\s+WAL STATUS\s+READER\s+CONFIRMED AGO\n`+
		slot+`\s+no\s+[0-9.]+ (B|KiB|MiB)\s+[0-9]+\s+reserved\s+relay-1\s+2m[0-9]+s\n`, out)

	var st statsJSON
	require.NoError(t, json.Unmarshal([]byte(ok(t, "stats", "--json", "--database-url", url)), &st))
	require.Len(t, st.Slots, 1)
	s := st.Slots[0]
	require.Equal(t, slot, s.Name)
	require.False(t, s.Active)
	require.Positive(t, s.LagBytes)
	require.Equal(t, bytesize.Format(s.LagBytes), s.Lag)
	require.Equal(t, "reserved", s.WALStatus)
	require.Equal(t, "relay-1", s.Reader)
	require.NotNil(t, s.ConfirmedAt)
	require.WithinDuration(t, confirmed, *s.ConfirmedAt, time.Millisecond)
	require.GreaterOrEqual(t, s.ConfirmedAgeSeconds, 120.0)

	c := &cli{getenv: func(string) string { return "" }, globals: globals{databaseURL: url, table: defaultTable}}
	d, store, err := c.openStore(t.Context())
	require.NoError(t, err)
	t.Cleanup(d.close)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(newStatsCollector(t.Context(), store)))
	require.Equal(t, 1, testutil.CollectAndCount(reg, "outbox_log_slot_lag_bytes"))
	require.Equal(t, 1, testutil.CollectAndCount(reg, "outbox_log_slot_confirmed_age_seconds"))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// deadListJSON is the JSON of dead list, and of events.
type deadListJSON struct {
	Events []eventJSON `json:"events"`
	Next   string      `json:"next"`
}

func TestDeadListAndShow(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, url string) {
		ids := seed(t, url, deadSeed...)

		out := ok(t, "dead", "list", "--database-url", url)
		require.Equal(t, 4, strings.Count(out, "\n"), out) // header and 3 events
		require.Contains(t, out, "decode order 4: unexpected EOF")

		var list deadListJSON
		require.NoError(t, json.Unmarshal([]byte(ok(t, "dead", "list", "--json", "--database-url", url, "--topic", "orders")), &list))
		require.Len(t, list.Events, 2)
		require.Empty(t, list.Next)
		require.Equal(t, "DEAD", list.Events[0].Status)

		// Every filter flag.
		for _, filter := range [][]string{
			{"--group", groupHTTP},
			{"--error", "SERVICE unavailable"},
			{"--aggregate-type", "order", "--aggregate-id", "6"},
			{"--type", "order.placed", "--topic", "payments"},
			{"--id", ids[5] + "," + ids[0]},
			{"--id", ids[5], "--id", ids[1]},
			{"--died-after", "30m", "--topic", "payments"},
			{"--died-before", time.Now().Add(time.Hour).Format(time.RFC3339), "--error", "503"},
		} {
			args := append([]string{"dead", "list", "--json", "--database-url", url}, filter...)
			require.NoError(t, json.Unmarshal([]byte(ok(t, args...)), &list), filter)
			require.Len(t, list.Events, 1, filter)
			require.Equal(t, ids[5], list.Events[0].ID, filter)
		}
		require.NoError(t, json.Unmarshal([]byte(ok(t, "dead", "list", "--json", "--database-url", url, "--died-before", "30m")), &list))
		require.Len(t, list.Events, 1)
		require.Equal(t, ids[3], list.Events[0].ID)

		// Paging.
		r := wmoutbox(t, nil, "dead", "list", "--database-url", url, "--limit", "2")
		require.Equal(t, exitOK, r.code, r.stderr)
		_, hint, found := strings.Cut(r.stderr, "--after ")
		require.True(t, found, r.stderr)
		next := strings.Fields(hint)[0]
		out = ok(t, "dead", "list", "--database-url", url, "--limit", "2", "--after", next)
		require.Equal(t, 2, strings.Count(out, "\n"), out)

		// show: JSON indented, bytes as a hex dump.
		out = ok(t, "dead", "show", "--database-url", url, ids[3])
		require.Contains(t, out, "Status:")
		require.Contains(t, out, "DEAD")
		require.Contains(t, out, "trace: t-1")
		require.Contains(t, out, "\"items\": [\n    \"a\"\n  ]")
		require.Contains(t, out, "decode order 4: unexpected EOF")
		out = ok(t, "dead", "show", "--database-url", url, ids[5])
		require.Contains(t, out, "00000000  de ad be ef")
		out = ok(t, "dead", "show", "--database-url", url, "--hide-payload", ids[3])
		require.NotContains(t, out, "items")
		require.NotContains(t, out, "t-1")
		require.Contains(t, out, "Payload: (hidden, 21 bytes)")
		var e eventJSON
		require.NoError(t, json.Unmarshal([]byte(ok(t, "dead", "show", "--json", "--database-url", url, ids[3])), &e))
		require.JSONEq(t, `{"n":1,"items":["a"]}`, string(e.Payload))
		require.Equal(t, groupDecode, e.ErrorGroup)

		r = wmoutbox(t, nil, "dead", "show", "--database-url", url, "no-such-id")
		require.Equal(t, exitError, r.code)
		require.Contains(t, r.stderr, "no event no-such-id")
	})
}

func TestDeadReplayAndPurge(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, url string) {
		ids := seed(t, url, deadSeed...)
		deadOf := func(topic string) int {
			var list deadListJSON
			require.NoError(t, json.Unmarshal([]byte(ok(t, "dead", "list", "--json", "--database-url", url, "--topic", topic)), &list))
			return len(list.Events)
		}

		// No filter.
		r := runIn(t, "y\n", true, "dead", "replay", "--database-url", url)
		require.Equal(t, exitUsage, r.code)
		require.Contains(t, r.stderr, "no filter")

		// --dry-run changes nothing.
		r = runIn(t, "", false, "dead", "replay", "--database-url", url, "--topic", "orders", "--dry-run")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, "Dry run: would replay 2 DEAD events matching topic=orders; nothing changed.")
		require.Contains(t, r.stdout, ids[3])
		var dry struct {
			DryRun  bool        `json:"dry_run"`
			Matched int64       `json:"matched"`
			Sample  []eventJSON `json:"sample"`
		}
		r = runIn(t, "", false, "dead", "purge", "--database-url", url, "--all", "--dry-run", "--json", "--sample", "1")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &dry))
		require.True(t, dry.DryRun)
		require.Equal(t, int64(3), dry.Matched)
		require.Len(t, dry.Sample, 1)
		require.Equal(t, 2, deadOf("orders"))

		// Without --yes: refused when stdin is no terminal, and when the
		// answer is not yes.
		r = runIn(t, "y\n", false, "dead", "replay", "--database-url", url, "--topic", "orders")
		require.Equal(t, exitUsage, r.code)
		require.Contains(t, r.stderr, "replay 2 DEAD events matching topic=orders: standard input is not a terminal to confirm on: add --yes")
		r = runIn(t, "n\n", true, "dead", "replay", "--database-url", url, "--topic", "orders")
		require.Equal(t, exitError, r.code)
		require.Contains(t, r.stderr, "replay 2 DEAD events matching topic=orders? [y/N] ")
		require.Contains(t, r.stderr, "not confirmed: nothing replayed")
		require.Equal(t, 2, deadOf("orders"))

		r = runIn(t, "y\n", true, "dead", "replay", "--database-url", url, "--topic", "orders")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Equal(t, "Replayed 2 DEAD events matching topic=orders.\n", r.stdout)
		require.Equal(t, 0, deadOf("orders"))

		// purge by group, --yes, JSON.
		r = runIn(t, "", false, "dead", "purge", "--database-url", url, "--group", groupHTTP, "--yes", "--json")
		require.Equal(t, exitOK, r.code, r.stderr)
		var purged map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &purged))
		require.Equal(t, map[string]any{"action": "purge", "matched": 1.0, "purged": 1.0}, purged)
		require.Equal(t, 0, deadOf("payments"))
		r = runIn(t, "", false, "dead", "purge", "--database-url", url, "--all")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, "Purged 0 DEAD events")
	})
}

func TestPurge(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, url string) {
		seed(t, url,
			seedEvent{topic: "t", status: outbox.StatusDone, age: 10 * 24 * time.Hour},
			seedEvent{topic: "t", status: outbox.StatusDone, age: 9 * 24 * time.Hour},
			seedEvent{topic: "t", status: outbox.StatusDone, age: time.Hour},
			seedEvent{topic: "t", status: outbox.StatusDead, age: 40 * 24 * time.Hour, err: "x", group: groupHTTP},
			seedEvent{topic: "t", status: outbox.StatusDead, age: 10 * 24 * time.Hour, err: "x", group: groupHTTP},
			seedEvent{topic: "t"},
		)
		r := wmoutbox(t, nil, "purge", "--database-url", url, "--done-older-than", "7d", "--dead-older-than", "30d", "--batch-size", "1", "--json")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.JSONEq(t, `{"done": 2, "dead": 1}`, r.stdout)
		require.Contains(t, r.stderr, "purge DONE events older than 7d: 1 deleted\npurge DONE events older than 7d: 2 deleted\n")
		require.Contains(t, r.stderr, "purge DEAD events older than 30d: 1 deleted\n")

		out := ok(t, "purge", "--database-url", url, "--done-older-than", "30m")
		require.Equal(t, "Purged 1 DONE events older than 30m.\n", out)

		var st statsJSON
		require.NoError(t, json.Unmarshal([]byte(ok(t, "stats", "--json", "--database-url", url)), &st))
		require.Equal(t, []topicStatsJSON{{Topic: "t", New: 1, Dead: 1, OldestDue: st.Topics[0].OldestDue, OldestPendingSeconds: st.Topics[0].OldestPendingSeconds}}, st.Topics)
	})
}

func TestEvents(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, url string) {
		first := seed(t, url,
			seedEvent{topic: "orders", aggregateID: "7", status: outbox.StatusDone},
			seedEvent{topic: "orders", aggregateID: "8"},
		)
		// Written later, in one transaction: one creation time, newest
		// first by event id.
		later := seed(t, url,
			seedEvent{topic: "payments", aggregateID: "7", status: outbox.StatusDead, err: "POST /charge: 503", group: groupHTTP},
			seedEvent{topic: "orders", aggregateID: "7"},
			seedEvent{topic: "orders", aggregateID: "7", status: outbox.StatusRetry},
		)
		newestFirst := []string{later[2], later[1], later[0], first[0]}

		out := ok(t, "events", "--database-url", url, "--aggregate-type", "order", "--aggregate-id", "7")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 5, out) // the header and 4 events
		require.Regexp(t, `^ID\s+STATUS\s+TOPIC\s+TYPE\s+CREATED\s+ATTEMPTS\s+ERROR`, lines[0])
		for i, id := range newestFirst {
			require.True(t, strings.HasPrefix(lines[i+1], id), "line %d: %s", i+1, lines[i+1])
		}
		require.Regexp(t, `RETRY\s+orders\s+order.placed\s+\S+\s+1\s+timeout`, lines[1])
		require.Regexp(t, `DEAD\s+payments\s+.*POST /charge: 503`, lines[3])
		require.Regexp(t, `DONE\s+orders`, lines[4])

		// Paging: the next page's flag goes to standard error.
		r := wmoutbox(t, nil, "events", "--database-url", url, "--aggregate-type", "order", "--aggregate-id", "7", "--limit", "3")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Equal(t, 4, strings.Count(r.stdout, "\n"), r.stdout)
		_, hint, found := strings.Cut(r.stderr, "--before ")
		require.True(t, found, r.stderr)
		out = ok(t, "events", "--database-url", url, "--aggregate-type", "order", "--aggregate-id", "7", "--limit", "3",
			"--before", strings.Fields(hint)[0])
		require.Equal(t, 2, strings.Count(out, "\n"), out)
		require.Contains(t, out, first[0])

		var list deadListJSON
		args := []string{"events", "--json", "--database-url", url, "--aggregate-type", "order", "--aggregate-id", "7", "--limit", "2"}
		require.NoError(t, json.Unmarshal([]byte(ok(t, args...)), &list))
		page := []string{list.Events[0].ID, list.Events[1].ID}
		require.Equal(t, newestFirst[:2], page)
		require.NotEmpty(t, list.Next)
		var last deadListJSON
		require.NoError(t, json.Unmarshal([]byte(ok(t, append(args, "--before", list.Next)...)), &last))
		list = last
		page = []string{list.Events[0].ID, list.Events[1].ID}
		require.Equal(t, newestFirst[2:], page)
		require.Empty(t, list.Next, "the last page")
		require.Equal(t, "DONE", list.Events[1].Status)

		require.NoError(t, json.Unmarshal([]byte(ok(t, "events", "--json", "--database-url", url, "--aggregate-type", "order",
			"--aggregate-id", "7", "--topic", "payments")), &list))
		require.Len(t, list.Events, 1)
		require.Equal(t, later[0], list.Events[0].ID)

		out = ok(t, "events", "--database-url", url, "--aggregate-id", "7")
		require.Equal(t, "No events of aggregate __GLOBAL__/7.\n", out, "the default type is the global aggregate")
	})
}

func TestOperatorCommandsNeedMigrations(t *testing.T) {
	t.Parallel()
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			url := d.empty(t)
			for _, args := range [][]string{
				{"stats"},
				{"dead", "list"},
				{"dead", "show", "--json", "some-id"},
				{"dead", "replay", "--all", "--yes"},
				{"dead", "purge", "--topic", "t", "--dry-run"},
				{"purge", "--done-older-than", "1d"},
				{"events", "--aggregate-id", "7"},
				{"serve", "--read-only", "--addr", "127.0.0.1:0"},
			} {
				r := wmoutbox(t, nil, append([]string{"--database-url", url}, args...)...)
				require.Equal(t, exitError, r.code, args)
				require.Contains(t, r.stderr, "run `wmoutbox migrate up`", args)
			}
		})
	}
}

func TestBadFlagValues(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + filepath.Join(t.TempDir(), "outbox.db")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"stats", "--fail-if-oldest", "soon"}, `invalid value "soon" for flag -fail-if-oldest`},
		{[]string{"stats", "--fail-if-oldest", "-1h"}, `invalid value "-1h" for flag -fail-if-oldest`},
		{[]string{"stats", "--fail-if-dead", "-1"}, "--fail-if-dead: want a count of at least 1"},
		{[]string{"stats", "--fail-if-dead", "many"}, `invalid value "many" for flag -fail-if-dead`},
		{[]string{"dead", "list", "--died-after", "yesterday"}, `invalid value "yesterday" for flag -died-after`},
		{[]string{"dead", "list", "--died-before", "2026-13-01"}, `invalid value "2026-13-01" for flag -died-before`},
		{[]string{"dead", "list", "--limit", "0"}, "--limit: want 1 to 10000"},
		{[]string{"dead", "show"}, "dead show: want one event ID"},
		{[]string{"dead", "purge"}, "dead purge: no filter"},
		{[]string{"dead", "replay", "--sample", "-1", "--all"}, "--sample: want 0 to 10000"},
		{[]string{"purge"}, "purge: give --done-older-than, --dead-older-than or both"},
		{[]string{"events", "--aggregate-type", "order"}, "events: --aggregate-id is required"},
		{[]string{"events", "--aggregate-id", "7", "--limit", "10001"}, "--limit: want 1 to 10000"},
		{[]string{"events", "--aggregate-id", "7", "--before", "yesterday"}, "--before: outbox: invalid request: aggregate cursor"},
		{[]string{"purge", "--dead-older-than", "0d"}, `invalid value "0d" for flag -dead-older-than`},
		{[]string{"purge", "--done-older-than", "1d", "--batch-size", "0"}, "--batch-size: want 1 to 100000"},
		{[]string{"stats", "extra"}, `unexpected argument "extra"`},
	} {
		r := wmoutbox(t, nil, append(tt.args, "--database-url", url)...)
		require.Equal(t, exitUsage, r.code, tt.args)
		require.Contains(t, r.stderr, tt.want, tt.args)
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{in: "7d", want: 7 * 24 * time.Hour},
		{in: "1d12h", want: 36 * time.Hour},
		{in: "90m", want: 90 * time.Minute},
		{in: "36h", want: 36 * time.Hour},
		{in: "1.5h", want: 90 * time.Minute},
		{in: "", err: true},
		{in: "d", err: true},
		{in: "7", err: true},
		{in: "-7d", err: true},
		{in: "0s", err: true},
		{in: "1d-2d", err: true},
		{in: "7dd", err: true},
		{in: "1d-48h", err: true},
	} {
		got, err := parseDuration(tt.in)
		if tt.err {
			require.Error(t, err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got, tt.in)
		require.Equal(t, tt.want, must(parseDuration(formatDuration(got))), tt.in)
	}
	require.Equal(t, "7d", formatDuration(7*24*time.Hour))
	require.Equal(t, "36h", formatDuration(36*time.Hour))
	require.Equal(t, "1h30m", formatDuration(90*time.Minute))
	require.Equal(t, "30s", formatDuration(30*time.Second))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
