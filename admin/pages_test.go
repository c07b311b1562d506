package admin_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/admin"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// someEvents are three DEAD events in two groups and three pending ones.
func someEvents() []outbox.Event {
	return []outbox.Event{
		deadEvent("01A", "orders", "g-timeout", "dial tcp 10.0.0.1:9092: i/o timeout", 30),
		deadEvent("01B", "orders", "g-timeout", "dial tcp 10.0.0.2:9092: i/o timeout", 20),
		deadEvent("01C", "payments", "g-schema", "schema mismatch: field amount", 10),
		pendingEvent("02A", "orders", outbox.StatusNew),
		pendingEvent("02B", "orders", outbox.StatusRetry),
		pendingEvent("02C", "payments", outbox.StatusNew),
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	store := newFakeStore()

	_, err := admin.New(store, admin.Config{})
	require.ErrorIs(t, err, admin.ErrNoAuthorizer)

	_, err = admin.New(store, admin.Config{ReadOnly: true})
	require.NoError(t, err)

	_, err = admin.New(nil, testConfig())
	require.ErrorContains(t, err, "nil Store")

	cfg := testConfig()
	cfg.PageSize = admin.MaxPageSize + 1
	_, err = admin.New(store, cfg)
	require.ErrorContains(t, err, "PageSize")

	cfg = testConfig()
	cfg.TrustedOrigins = []string{"not an origin"}
	_, err = admin.New(store, cfg)
	require.ErrorContains(t, err, "TrustedOrigins")
}

func TestOverview(t *testing.T) {
	t.Parallel()
	b := setup(t, testConfig(), someEvents()...)
	b.store.claims = []outbox.ClaimStats{{Owner: "relay-7", Topic: "orders", Events: 12, OldestClaim: fakeNow.Add(-time.Second), LeaseEnds: fakeNow.Add(time.Minute)}}
	b.store.relays = []outbox.RelayStats{
		{Owner: "relay-6", Until: fakeNow.Add(-time.Second)},
		{Owner: "relay-7", Until: fakeNow.Add(10 * time.Second), Alive: true},
	}

	body := newBrowser(t, b.h).get("/", http.StatusOK)
	require.Contains(t, body, "<title>Overview · wmoutbox</title>")
	require.Contains(t, body, `<a href="./pending?topic=orders">orders</a>`)
	require.Contains(t, body, `<td class="n">1</td><td class="n">1</td><td class="n">2</td><td>1h0m0s</td>`,
		"orders: one NEW, one RETRY, 2 pending, waited an hour")
	require.Contains(t, body, "relay-7")
	require.Regexp(t, `<td>relay-6</td><td class="time">[^<]+</td><td>dead: `, body)
	require.Regexp(t, `<td>relay-7</td><td class="time">[^<]+</td><td>alive</td>`, body)
	require.NotContains(t, body, "Log slots", "no slot, no section")
	require.Contains(t, body, `<a href="./dead?group=g-timeout">reason of g-timeout</a>`)
	require.Contains(t, body, `<a href="./dead?group=g-schema">reason of g-schema</a>`)
	require.Equal(t, 10, b.store.groupQueries[0].Limit)
}

// The overview lists the log slots, when the database has any: the log
// each holds back and who confirmed a position in it, when.
func TestOverviewLogSlots(t *testing.T) {
	t.Parallel()
	b := setup(t, testConfig(), someEvents()...)
	b.store.slots = []outbox.SlotStats{
		{Name: "outbox_orders", Active: true, LagBytes: 3 << 30, WALStatus: "extended", Reader: "relay-7",
			ConfirmedAt: fakeNow.Add(-90 * time.Second), ConfirmedAge: 90 * time.Second},
		{Name: "debezium", LagBytes: 1536, WALStatus: "reserved"},
	}

	body := newBrowser(t, b.h).get("/", http.StatusOK)
	require.Contains(t, body, "<h2>Log slots</h2>")
	require.Regexp(t, `<td>outbox_orders</td><td>yes</td><td class="n">3.0 GiB</td><td class="n">3,221,225,472</td>`+
		`<td>extended</td><td>relay-7</td><td class="time">2026-11-29 11:58:30.000 UTC</td><td>1m30s</td>`, body)
	require.Contains(t, body, `<td>debezium</td><td>no</td><td class="n">1.5 KiB</td><td class="n">1,536</td>`+
		`<td>reserved</td><td>—</td><td class="time">—</td><td>—</td>`)
}

func TestDeadPage(t *testing.T) {
	t.Parallel()
	b := setup(t, testConfig(), someEvents()...)
	br := newBrowser(t, b.h)

	body := br.get("/dead", http.StatusOK)
	require.Contains(t, body, "3 matching")
	for _, id := range []string{"01A", "01B", "01C"} {
		require.Contains(t, body, `<a href="./events/`+id+`">`+id+`</a>`)
	}
	require.NotContains(t, body, "02A", "a pending event on the dead-letter page")
	require.Contains(t, body, `<a href="./dead?group=g-timeout">reason of g-timeout</a>`)
	require.Contains(t, body, `value="g-timeout"`, "the group's replay form")
	require.Contains(t, body, "Replay selected")

	// A group's link lists its events.
	body = br.get(hrefTo(t, body, "reason of g-timeout")[1:], http.StatusOK)
	require.Contains(t, body, "2 matching")
	require.Contains(t, body, "01A")
	require.NotContains(t, body, `value="01C"`)
	require.Contains(t, body, `<tr class="selected">`)
}

func TestDeadFiltersReachTheStore(t *testing.T) {
	t.Parallel()
	b := setup(t, testConfig(), someEvents()...)
	q := url.Values{
		"topic": {"orders"}, "type": {"OrderCreated"}, "aggtype": {"order"}, "aggid": {"o-01A"},
		"error": {"TIMEOUT"}, "group": {"g-timeout"},
		"died_after": {"2026-11-29T11:00:00Z"}, "died_before": {"2026-11-29T11:59"},
		"after": {"01"}, "limit": {"7"},
	}
	body := newBrowser(t, b.h).get("/dead?"+q.Encode(), http.StatusOK)
	require.Contains(t, body, "1 matching")

	want := outbox.DeadFilter{
		Topic: "orders", EventType: "OrderCreated", AggregateType: "order", AggregateID: "o-01A",
		ErrorContains: "TIMEOUT", Group: "g-timeout",
		DiedAfter:  time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC),
		DiedBefore: time.Date(2026, 11, 29, 11, 59, 0, 0, time.UTC),
	}
	require.Equal(t, []outbox.DeadQuery{{DeadFilter: want, After: "01", Limit: 8}}, b.store.deadQueries)
	require.Empty(t, b.store.counts, "every group is listed: the total is the selected one's count")
	// The groups are those of the other fields: choosing a group keeps
	// the others in view.
	groups := want
	groups.Group = ""
	require.Equal(t, []outbox.DeadGroupQuery{{DeadFilter: groups, Limit: admin.DefaultPageSize + 1}}, b.store.groupQueries)
	// The form shows the filter back.
	require.Contains(t, body, `name="aggid" value="o-01A"`)
}

func TestDeadBadParameters(t *testing.T) {
	t.Parallel()
	b := setup(t, testConfig(), someEvents()...)
	br := newBrowser(t, b.h)
	require.Contains(t, br.get("/dead?died_after=yesterday", http.StatusBadRequest), "is not a time")
	require.Contains(t, br.get("/dead?limit=1001", http.StatusBadRequest), "limit")
	require.Contains(t, br.get("/pending?status=DEAD", http.StatusBadRequest), "Bad status")
	require.Empty(t, b.store.deadQueries)
}

// TestDeadTotal checks the dead-letter page's total: the sum of the
// groups' counts, or the selected group's, while the page lists every
// group; CountDead's once there are more groups than it lists.
func TestDeadTotal(t *testing.T) {
	t.Parallel()
	var events []outbox.Event
	for i := range 6 {
		g := fmt.Sprintf("g%d", i%3) // 2 events in each of 3 groups
		events = append(events, deadEvent(fmt.Sprintf("01%c", 'A'+i), "orders", g, "boom "+g, i))
	}
	for _, c := range []struct {
		name     string
		pageSize int
		path     string
		want     string
		counted  bool
	}{
		{"every group listed", 3, "/dead", "6 matching", false},
		{"one group selected", 3, "/dead?group=g1", "2 matching", false},
		{"an unknown group", 3, "/dead?group=nope", "0 matching", false},
		{"groups cut", 2, "/dead", "6 matching", true},
		{"groups cut, one selected", 2, "/dead?group=g2", "2 matching", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.PageSize = c.pageSize
			b := setup(t, cfg, events...)
			require.Contains(t, newBrowser(t, b.h).get(c.path, http.StatusOK), c.want)
			if c.counted {
				require.Len(t, b.store.counts, 1)
			} else {
				require.Empty(t, b.store.counts, "the total adds up the groups: no CountDead")
			}
		})
	}
}

func TestDeadPaging(t *testing.T) {
	t.Parallel()
	var events []outbox.Event
	for i := range 5 {
		events = append(events, deadEvent(fmt.Sprintf("01%c", 'A'+i), "orders", "g", "boom", i))
	}
	cfg := testConfig()
	cfg.PageSize = 2
	b := setup(t, cfg, events...)
	br := newBrowser(t, b.h)

	body := br.get("/dead?topic=orders", http.StatusOK)
	require.Contains(t, body, "5 matching", "the total of the one group listed")
	require.Contains(t, body, `value="01B"`)
	require.NotContains(t, body, `value="01C"`)
	next := hrefTo(t, body, "Next page")
	require.Equal(t, "./dead?after=01B&topic=orders", next)

	body = br.get(next[1:], http.StatusOK)
	require.Contains(t, body, `value="01C"`)
	require.Contains(t, body, `value="01D"`)
	require.NotContains(t, body, `value="01B"`)
	require.Equal(t, "./dead?topic=orders", hrefTo(t, body, "First page"))

	body = br.get(hrefTo(t, body, "Next page")[1:], http.StatusOK)
	require.Contains(t, body, `value="01E"`)
	require.NotContains(t, body, "Next page")
	// Each page asked for one more row than it shows, to know whether
	// another page follows, and never more.
	for _, q := range b.store.deadQueries {
		require.Equal(t, 3, q.Limit)
	}

	// limit asks for another page size, kept by the links.
	body = br.get("/dead?limit=3", http.StatusOK)
	require.Equal(t, "./dead?after=01C&limit=3", hrefTo(t, body, "Next page"))
}

func TestEventPage(t *testing.T) {
	t.Parallel()
	dead := deadEvent("01A", "orders", "g-timeout", "i/o timeout", 5)
	dead.LockedBy = "relay-1"
	dead.IdempotencyKey = "order-42 <created>"
	binary := pendingEvent("02A", "orders", outbox.StatusNew)
	binary.PayloadBytes = []byte("\x00\x01binary\xff")
	huge := pendingEvent("02B", "orders", outbox.StatusNew)
	huge.PayloadBytes = nil
	huge.PayloadJSON = []byte(`{"blob":"` + strings.Repeat("x", 200) + `END"}`)
	cfg := testConfig()
	cfg.PayloadLimit = 100
	b := setup(t, cfg, dead, binary, huge)
	br := newBrowser(t, b.h)

	body := br.get("/events/01A", http.StatusOK)
	require.Contains(t, body, "<title>Event 01A · wmoutbox</title>")
	require.Contains(t, body, `<span class="status sDEAD">DEAD</span>`)
	require.Contains(t, body, "<pre>i/o timeout</pre>")
	require.Contains(t, body, `<a href="../dead?group=g-timeout">g-timeout</a>`)
	require.Contains(t, body, "held by relay-1")
	require.Contains(t, body, "<tr><th>Idempotency key</th><td>order-42 &lt;created&gt;</td></tr>")
	require.Contains(t, body, "<td>trace</td><td>t-01A</td>")
	require.Contains(t, body, "{\n  &#34;order&#34;: &#34;01A&#34;\n}", "the JSON payload, indented")
	require.Contains(t, body, `action="../dead/replay"`)
	require.Contains(t, body, "Purge…")

	body = br.get("/events/02A", http.StatusOK)
	require.Contains(t, body, "<tr><th>Idempotency key</th><td>—</td></tr>")
	require.Contains(t, body, "00000000  00 01 62 69 6e 61 72 79  ff", "a hex dump")
	require.NotContains(t, body, "Replay…", "replay is for DEAD events")

	body = br.get("/events/02B", http.StatusOK)
	require.Contains(t, body, "Showing the first 100 of 214 bytes.")
	require.NotContains(t, body, "END")

	require.Contains(t, br.get("/events/nope", http.StatusNotFound), "No event has the id nope")
	require.Contains(t, br.get("/no/such/page", http.StatusNotFound), "No such page")
}

func TestPendingPage(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.PageSize = 1
	b := setup(t, cfg, someEvents()...)
	br := newBrowser(t, b.h)

	body := br.get("/pending", http.StatusOK)
	require.Contains(t, body, `<a href="./events/02A">02A</a>`)
	require.NotContains(t, body, "01A", "a DEAD event on the pending page")
	require.NotContains(t, body, `type="checkbox"`)
	require.Contains(t, body, "<th>Due</th>", "pending events show when they are due")
	require.Equal(t, "./pending?after=02A", hrefTo(t, body, "Next page"))

	body = br.get("/pending?topic=orders&status=RETRY", http.StatusOK)
	require.Contains(t, body, "02B")
	require.NotContains(t, body, "Next page")
	require.Equal(t, outbox.PendingQuery{Topic: "orders", Statuses: []outbox.Status{outbox.StatusRetry}, Limit: 2},
		b.store.pendingQueries[1])
}

// aggregateEvents are five events of the aggregate order/o-7, of every
// status, the middle three written at the same time, and one of another
// aggregate type with the same id.
func aggregateEvents() []outbox.Event {
	var events []outbox.Event
	for i, st := range []outbox.Status{outbox.StatusDone, outbox.StatusDead, outbox.StatusRetry, outbox.StatusDone, outbox.StatusNew} {
		e := pendingEvent(fmt.Sprintf("03%c", 'A'+i), "orders", st)
		e.AggregateID = "o-7"
		e.CreatedAt = fakeNow.Add(time.Duration(min(max(i, 1), 3)) * time.Minute)
		e.Attempts, e.LastError = i, fmt.Sprintf("failure %d", i)
		events = append(events, e)
	}
	other := pendingEvent("03Z", "orders", outbox.StatusNew)
	other.AggregateType, other.AggregateID = "invoice", "o-7"
	return append(events, other)
}

func TestAggregatePage(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.PageSize = 2
	b := setup(t, cfg, aggregateEvents()...)
	br := newBrowser(t, b.h)

	body := br.get("/aggregates", http.StatusOK)
	require.Contains(t, body, "Give an aggregate id")
	require.Empty(t, b.store.aggQueries, "no id, no query")

	body = br.get("/aggregates?aggtype=order&aggid=o-7", http.StatusOK)
	require.Contains(t, body, "<title>Aggregate order / o-7 · wmoutbox</title>")
	require.Contains(t, body, "<th>Created</th>")
	require.Contains(t, body, `<a href="./events/03E">03E</a>`)
	require.Contains(t, body, `<a href="./events/03D">03D</a>`)
	require.NotContains(t, body, "03C")
	require.Less(t, strings.Index(body, "03E"), strings.Index(body, "03D"), "newest first")
	require.Contains(t, body, `<span class="status sNEW">NEW</span>`)
	require.Contains(t, body, "failure 3")
	require.Contains(t, body, "2026-11-29 12:03:00.000 UTC")
	require.NotContains(t, body, "First page")
	next := hrefTo(t, body, "Next page")
	require.Equal(t, "./aggregates?aggid=o-7&aggtype=order&before=2026-11-29T12%3A03%3A00Z%2F03D", next)

	// The second page starts within the events written at the same time.
	body = br.get(next[1:], http.StatusOK)
	require.Contains(t, body, `<a href="./events/03C">03C</a>`)
	require.Contains(t, body, `<a href="./events/03B">03B</a>`)
	require.NotContains(t, body, "03D")
	require.Equal(t, "./aggregates?aggid=o-7&aggtype=order", hrefTo(t, body, "First page"))
	body = br.get(hrefTo(t, body, "Next page")[1:], http.StatusOK)
	require.Contains(t, body, "03A")
	require.NotContains(t, body, "03Z", "another aggregate type")
	require.NotContains(t, body, "Next page")
	for _, q := range b.store.aggQueries {
		require.Equal(t, 2, q.Limit)
		require.Equal(t, outbox.AggregateType("order"), q.Type)
	}

	// The topic and the page size reach the store and stay in the links.
	body = br.get("/aggregates?aggtype=order&aggid=o-7&topic=orders&limit=1", http.StatusOK)
	require.Equal(t, outbox.AggregateQuery{Type: "order", ID: "o-7", Topic: "orders", Limit: 1}, b.store.aggQueries[len(b.store.aggQueries)-1])
	require.Contains(t, hrefTo(t, body, "Next page"), "limit=1")
	require.Contains(t, hrefTo(t, body, "Next page"), "topic=orders")

	require.Contains(t, br.get("/aggregates?aggid=o-7&before=yesterday", http.StatusBadRequest), "Bad page")
	require.Contains(t, br.get("/aggregates?aggid=o-7&limit=0", http.StatusBadRequest), "Bad page size")
}

// The event page, and the rows of the lists, link an event's aggregate to
// its page; an event without an aggregate id links nowhere.
func TestAggregateLinks(t *testing.T) {
	t.Parallel()
	b := setup(t, testConfig(), append(someEvents(), aggregateEvents()...)...)
	br := newBrowser(t, b.h)

	body := br.get("/events/01A", http.StatusOK)
	require.Contains(t, body, `<a href="../aggregates?aggid=o-01A&amp;aggtype=order">order / o-01A</a>`)
	body = br.get(resolve(t, "/events/01A", hrefTo(t, body, "order / o-01A")), http.StatusOK)
	require.Contains(t, body, `<a href="./events/01A">01A</a>`)

	body = br.get("/dead", http.StatusOK)
	require.Contains(t, body, `<a href="./aggregates?aggid=o-01B&amp;aggtype=order" title="The aggregate's events">order / o-01B</a>`)
	body = br.get("/pending", http.StatusOK)
	require.Contains(t, body, `<a href="./aggregates?aggid=o-7&amp;aggtype=invoice"`)
	require.Contains(t, body, "<td>order</td>", "02A has no aggregate id: no link")
	require.NotContains(t, br.get("/events/02A", http.StatusOK), "aggregates?")
}

func TestStoreErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, testConfig(), someEvents()...)
	b.store.err = errStoreDown
	br := newBrowser(t, b.h)
	for _, path := range []string{"/", "/dead", "/pending", "/events/01A", "/aggregates?aggid=o-7"} {
		body := br.get(path, http.StatusInternalServerError)
		require.Contains(t, body, "connection refused", path)
	}
	require.Contains(t, b.logs.String(), "level=ERROR")
	require.Contains(t, b.logs.String(), "connection refused")
}

func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, testConfig(), someEvents()...)
	br := newBrowser(t, b.h)
	for _, path := range []string{"/", "/dead", "/events/01A", "/static/admin.css"} {
		w := br.do(http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, w.Code, path)
		csp := w.Header().Get("Content-Security-Policy")
		require.Contains(t, csp, "frame-ancestors 'none'")
		require.Contains(t, csp, "script-src 'self'")
		require.NotContains(t, csp, "unsafe-inline")
		require.Equal(t, "nosniff", w.Header().Get("X-Content-Type-Options"))
		require.Equal(t, "no-referrer", w.Header().Get("Referrer-Policy"))
	}
	w := br.do(http.MethodGet, "/static/admin.js", nil)
	require.Equal(t, http.StatusOK, w.Code)
	require.Contains(t, w.Header().Get("Content-Type"), "javascript")
	require.Contains(t, w.Body.String(), "data-select-all")
	require.Equal(t, http.StatusNotFound, br.do(http.MethodGet, "/static/", nil).Code, "no listing")

	// No inline script or style: the CSP would block them.
	body := br.get("/dead", http.StatusOK)
	require.NotContains(t, body, "<script>")
	require.NotContains(t, body, "<style")
	require.NotContains(t, body, " onclick=")
	require.NotContains(t, body, " style=")
}
