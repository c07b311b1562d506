package admin_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wmoutbox/wmoutbox/admin"
	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// The table BenchmarkPagesPostgres seeds: a million DEAD events in 20
// failure groups over 5 topics, dead over 30 days, among 100k DONE and
// 10k pending events.
const (
	seedDead    = 1_000_000
	seedDone    = 100_000
	seedPending = 10_000
)

var seedTopics = []string{"orders", "payments", "shipping", "ledger-sync", "notifications"}

// seedErrors are the errors of the failure groups, largest group first.
// In each, {n} becomes a number, {a} and {b} bytes of an address: what
// varies between events failing for one reason.
var seedErrors = []string{
	"charge order {n}: card declined",
	"dial tcp 10.0.{a}.{b}:5432: connect: connection refused",
	"kafka: produce to orders: broker 10.0.{a}.{b}:9092 not available",
	"http POST https://api.carrier.example/v2/shipments: 503 Service Unavailable after {n}ms",
	"ledger: entry {n} already posted",
	"smtp: 550 mailbox unavailable for customer {n}",
	"validate order {n}: unknown currency \"XBT\"",
	"context deadline exceeded after {n}ms",
	"fraud check: order {n} scored {a} above threshold",
	"inventory: sku {n} out of stock",
	"json: cannot unmarshal string into Go struct field Order.total of type int64",
	"redis 10.0.{a}.{b}:6379: i/o timeout",
	"tax service: region {a} not configured",
	"pq: duplicate key value violates unique constraint \"shipments_order_id_key\" for order {n}",
	"payment provider: rate limited, retry after {a}s",
	"sns publish: AccessDenied for topic arn {n}",
	"customer {n} not found",
	"grpc: rpc error: code = Unavailable desc = connection reset by peer 10.0.{a}.{b}:443",
	"schema registry: subject orders-value version {a} not found",
	"refund {n}: amount exceeds captured amount",
}

// seedTable fills the database at pool with the benchmark's events, in
// one statement, and vacuums and analyzes the table. The DEAD events' ids
// interleave with the others', as they would in a table where some
// events fail; error_group is what the relay would record for their
// errors (codec.ErrorGroup).
func seedTable(b *testing.B, pool *pgxpool.Pool) {
	b.Helper()
	ctx := b.Context()
	groups := make([]string, len(seedErrors))
	for i, e := range seedErrors {
		groups[i], _ = codec.ErrorGroup(seedError(e, 123456, 7, 42))
	}
	total := seedDead + seedDone + seedPending
	// Row i of total: one in 111 pending, ten in 111 DONE, the rest DEAD;
	// its group skewed towards the first (power 3), its topic one of two
	// of its group's, its time i/total of 30 days before now.
	_, err := pool.Exec(ctx, `SELECT setseed(0.42)`)
	if err != nil {
		b.Fatal(err)
	}
	_, err = pool.Exec(ctx, `
INSERT INTO outbox_event (event_id, event_type, topic, aggregate_type, aggregate_id, payload, payload_json, headers,
    status, attempts, occurred_at, available_at, created_at, updated_at, done_at, last_error, error_group)
SELECT '01JD' || upper(lpad(to_hex(i), 22, '0')),
    'Order' || (ARRAY['Placed', 'Paid', 'Shipped', 'Refunded'])[1 + i % 4],
    ($3::text[])[1 + (g + i % 2) % 5],
    'Order', 'o-' || (i * 7919 % 1000003),
    convert_to('{"orderId":"o-' || (i * 7919 % 1000003) || '","total":' || (i % 10000) || ',"currency":"EUR","lines":[{"sku":"sku-' || (i % 977) || '","qty":' || (1 + i % 3) || '}]}', 'UTF8'),
    true, ('{"outbox_message_uuid":"' || gen_random_uuid() || '"}')::jsonb,
    CASE WHEN i % 111 = 110 THEN (i / 111 % 2) * 2 WHEN i % 111 >= 100 THEN 1 ELSE 3 END,
    CASE WHEN i % 111 >= 100 THEN 0 ELSE 10 END,
    at, at + CASE WHEN i % 111 = 110 THEN (i % 7) * interval '1 minute' - interval '3 minutes' ELSE interval '0' END,
    at, at + interval '2 minutes',
    CASE WHEN i % 111 BETWEEN 100 AND 109 THEN at + interval '2 minutes' END,
    CASE WHEN i % 111 < 100 THEN replace(replace(replace(($1::text[])[1 + g], '{n}', (i * 7919 % 1000003)::text),
        '{a}', (i % 250)::text), '{b}', (i / 250 % 250)::text) END,
    CASE WHEN i % 111 < 100 THEN ($2::text[])[1 + g] END
FROM (
    SELECT i, floor(20 * power(random(), 3))::int AS g,
        now() - interval '30 days' + (i::float8 / $4) * interval '30 days' AS at
    FROM generate_series(1, $4::bigint) AS i
) AS s`, seedErrors, groups, seedTopics, total)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE outbox_event`); err != nil {
		b.Fatal(err)
	}
}

// seedError is e with its variables set.
func seedError(e string, n, a, bb int) string {
	return strings.NewReplacer("{n}", strconv.Itoa(n), "{a}", strconv.Itoa(a), "{b}", strconv.Itoa(bb)).Replace(e)
}

// checkSeed checks that the seeded error groups are those the relay
// records, on a sample of the DEAD rows.
func checkSeed(b *testing.B, pool *pgxpool.Pool) {
	b.Helper()
	ctx := b.Context()
	rows, err := pool.Query(ctx, `SELECT last_error, error_group FROM outbox_event TABLESAMPLE SYSTEM (1)
WHERE status = 3 LIMIT 500`)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var lastError, group string
		if err := rows.Scan(&lastError, &group); err != nil {
			b.Fatal(err)
		}
		if want, _ := codec.ErrorGroup(lastError); group != want {
			b.Fatalf("seeded %q in group %s; the relay would record %s", lastError, group, want)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	if n == 0 {
		b.Fatal("no DEAD row sampled")
	}
}

// BenchmarkPagesPostgres serves the pages over a PostgreSQL table of a
// million DEAD events, seeded once: what an operator waits for on each
// page. Skipped under -short.
//
//	go test -run '^$' -bench PagesPostgres -benchtime 20x ./admin/
func BenchmarkPagesPostgres(b *testing.B) {
	if testing.Short() {
		b.Skip("seeds a million rows; skipped under -short")
	}
	ctx := b.Context()
	pool := testdb.New(b)
	start := time.Now()
	seedTable(b, pool)
	checkSeed(b, pool)
	b.Logf("seeded %d DEAD, %d DONE and %d pending events in %s", seedDead, seedDone, seedPending,
		time.Since(start).Round(time.Second))

	store, err := postgres.NewStore(pool, postgres.Config{})
	if err != nil {
		b.Fatal(err)
	}
	h, err := admin.New(store, admin.Config{Authorize: admin.BearerToken("t")})
	if err != nil {
		b.Fatal(err)
	}
	var middle, aggregate, group, smallGroup string
	err = pool.QueryRow(ctx, `SELECT event_id, aggregate_id FROM outbox_event WHERE status = 3 ORDER BY event_id
OFFSET $1 LIMIT 1`, seedDead/2).Scan(&middle, &aggregate)
	if err != nil {
		b.Fatal(err)
	}
	err = pool.QueryRow(ctx, `SELECT max(error_group) FILTER (WHERE rank = 1), max(error_group) FILTER (WHERE rank = 20)
FROM (SELECT error_group, rank() OVER (ORDER BY count(*) DESC) AS rank FROM outbox_event WHERE status = 3
GROUP BY error_group) AS g`).Scan(&group, &smallGroup)
	if err != nil {
		b.Fatal(err)
	}

	for _, page := range []struct{ name, path string }{
		{"overview", "/"},
		{"dead", "/dead"},
		{"dead/group", "/dead?" + url.Values{"group": {group}}.Encode()},
		{"dead/smallgroup", "/dead?" + url.Values{"group": {smallGroup}}.Encode()},
		{"dead/topic", "/dead?topic=payments"},
		{"dead/deep", "/dead?" + url.Values{"after": {middle}}.Encode()},
		{"event", "/events/" + middle},
		{"pending", "/pending"},
		{"aggregate", "/aggregates?" + url.Values{"aggtype": {"Order"}, "aggid": {aggregate}}.Encode()},
	} {
		b.Run(page.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, page.path, http.NoBody)
			r.Header.Set("Authorization", "Bearer t")
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("GET %s: %d %s", page.path, w.Code, w.Body.String())
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
		})
	}
}
