package browsertest

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/admin"
	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/internal/testenv"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

var updateScreenshot = flag.Bool("update-screenshot", false,
	"write the dead-letter page's screenshot to "+screenshotPath)

const (
	// screenshotPath is the screenshot's file, from this package's
	// directory.
	screenshotPath = "../../docs/images/admin-dead-letters.png"
	// mount is where the test server mounts the handler.
	mount = "/ops/outbox"
	// testTimeout bounds the whole browser test.
	testTimeout = 2 * time.Minute
	token       = "s3cret-operator-token"

	topicPayments = "payments"
	topicLedger   = "ledger-sync"
)

// The two ways the handler fails events, before it is fixed.
const (
	kindCharge = "charge" // charge order N: card declined
	kindSync   = "sync"   // dial tcp 10.0.0.N:5432: connection refused
)

type payload struct {
	Kind  string `json:"kind"`
	Order int    `json:"order"`
	Host  int    `json:"host"`
}

// relay is a Subscriber on both topics whose handler fails every event,
// by its kind, until fixed is set, and then records the events it
// delivers.
type relay struct {
	fixed atomic.Bool

	mu        sync.Mutex
	failed    map[string][]string // kind → event ids
	delivered map[string]bool
}

func (r *relay) handle(msg *message.Message) error {
	id := msg.Metadata.Get(watermilladapter.MetadataEventID)
	if r.fixed.Load() {
		r.mu.Lock()
		r.delivered[id] = true
		r.mu.Unlock()
		return nil
	}
	var p payload
	if err := json.Unmarshal(msg.Payload, &p); err != nil {
		return err
	}
	r.mu.Lock()
	r.failed[p.Kind] = append(r.failed[p.Kind], id)
	r.mu.Unlock()
	switch p.Kind {
	case kindCharge:
		return fmt.Errorf("charge order %d: card declined", p.Order)
	default:
		return fmt.Errorf("dial tcp 10.0.0.%d:5432: connection refused", p.Host)
	}
}

// failedIDs returns the ids of the events of kind that failed.
func (r *relay) failedIDs(kind string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(slices.Values(r.failed[kind]))
}

// deliveredAll reports whether every one of ids was delivered.
func (r *relay) deliveredAll(ids []string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if !r.delivered[id] {
			return false
		}
	}
	return true
}

// run consumes topic until ctx ends.
func (r *relay) run(ctx context.Context, sub *watermilladapter.Subscriber, topic string) error {
	msgs, err := sub.Subscribe(ctx, topic)
	if err != nil {
		return err
	}
	go func() {
		for msg := range msgs {
			if err := r.handle(msg); err != nil {
				watermilladapter.RecordError(msg, err)
				msg.Nack()
				continue
			}
			msg.Ack()
		}
	}()
	return nil
}

type bundle struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	store *postgres.Store
	pub   *watermilladapter.Publisher[pgx.Tx]
	relay *relay
	// base is the page's URL, ending in a slash.
	base string
}

// setup migrates a fresh database and starts a relay whose handler fails,
// and the admin page on a test server.
func setup(t *testing.T) *bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)

	pool := testdb.New(t)
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	sub, err := watermilladapter.NewSubscriber(store, watermilladapter.SubscriberConfig{
		// The first failure is the last: the events go DEAD at once.
		RetryPolicy: outbox.Backoff{MaxAttempts: 1},
		// Replayed events wait for a poll (ReplayDead wakes no relay).
		PollInterval: 50 * time.Millisecond,
		DrainTimeout: time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sub.Close()) })
	pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: sub})
	require.NoError(t, err)

	r := &relay{failed: map[string][]string{}, delivered: map[string]bool{}}
	for _, topic := range []string{topicPayments, topicLedger} {
		require.NoError(t, r.run(ctx, sub, topic))
	}

	h, err := admin.New(store, admin.Config{Authorize: admin.BearerToken(token), Title: "orders-service outbox"})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(mount+"/", http.StripPrefix(mount, h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	return &bundle{ctx: ctx, pool: pool, store: store, pub: pub, relay: r, base: srv.URL + mount + "/"}
}

// publish writes events of kind on topic, numbered from first, in one
// transaction.
func (b *bundle) publish(t *testing.T, topic, kind string, first, n int) {
	t.Helper()
	err := b.store.InTx(b.ctx, func(ctx context.Context, tx pgx.Tx) error {
		for i := first; i < first+n; i++ {
			p := payload{Kind: kind, Order: 1000 + 37*i, Host: 10 + i}
			body, err := json.Marshal(p)
			if err != nil {
				return err
			}
			msg := message.NewMessage(watermill.NewUUID(), body)
			if kind == kindCharge {
				msg.Metadata.Set(watermilladapter.MetadataEventType, "OrderPaymentRequested")
				msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
				msg.Metadata.Set(watermilladapter.MetadataAggregateID, fmt.Sprintf("o-%d", p.Order))
			} else {
				msg.Metadata.Set(watermilladapter.MetadataEventType, "LedgerEntryPosted")
				msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Ledger")
				msg.Metadata.Set(watermilladapter.MetadataAggregateID, fmt.Sprintf("l-%d", i))
			}
			if err := b.pub.WithTx(tx).Publish(topic, msg); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
}

// countDead counts every DEAD event.
func (b *bundle) countDead(t *testing.T) int64 {
	t.Helper()
	n, err := b.store.CountDead(b.ctx, outbox.DeadFilter{})
	require.NoError(t, err)
	return n
}

// row is what the test compares of the table's rows.
type row struct {
	ID        string
	Status    int16
	Attempts  int
	UpdatedAt time.Time
	Group     *string
}

// rows reads every row of the table, by id.
func (b *bundle) rows(t *testing.T) map[string]row {
	t.Helper()
	rs, err := b.pool.Query(b.ctx, `SELECT event_id, status, attempts, updated_at, error_group FROM outbox_event`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rs, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	m := make(map[string]row, len(got))
	for _, r := range got {
		m[r.ID] = r
	}
	return m
}

// waitFor polls cond until it holds, failing the test at the context's
// deadline.
func (b *bundle) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-b.ctx.Done():
			t.Fatalf("waiting until %s: %v", what, b.ctx.Err())
		case <-tick.C:
		}
	}
}

// groupCell is a row of the page's failure group table.
type groupCell struct {
	Reason string `json:"reason"`
	Count  string `json:"count"`
}

const readGroups = `[...document.querySelectorAll('table.groups tbody tr')].map(tr => ({
	reason: (tr.querySelector('td.error a') || {}).textContent || '',
	count: (tr.querySelector('td.n') || {}).textContent || '',
}))`

// groupButton is the XPath of a button of the failure group whose reason
// contains reason.
func groupButton(reason, label string) chromedp.Search {
	return chromedp.Search(fmt.Sprintf(
		`//table[contains(@class, "groups")]//tr[.//td[contains(@class, "error")]/a[contains(., %q)]]//button[contains(., %q)]`,
		reason, label))
}

// TestDeadLetterPage fails events into two failure groups, then, in a
// headless Chromium, replays one group through the page and purges the
// other, and checks what the relay delivered and what the table holds.
func TestDeadLetterPage(t *testing.T) {
	t.Parallel()
	chromium := findChromium(t)
	b := setup(t)

	// 5 events failing one way, 3 another: two groups of DEAD events.
	b.publish(t, topicPayments, kindCharge, 0, 5)
	b.publish(t, topicLedger, kindSync, 0, 3)
	b.waitFor(t, "the 8 events are DEAD", func() bool { return b.countDead(t) == 8 })
	chargeIDs, syncIDs := b.relay.failedIDs(kindCharge), b.relay.failedIDs(kindSync)
	require.Len(t, chargeIDs, 5)
	require.Len(t, syncIDs, 3)
	b.relay.fixed.Store(true)

	browser := newBrowser(b.ctx, t, chromium)

	// The dead letters: two groups, with their normalised reasons.
	require.NoError(t, chromedp.Do(browser,
		chromedp.Navigate(b.base+"dead"),
		chromedp.WaitVisible(chromedp.CSS("table.groups")),
	))
	groups, err := chromedp.Run(browser, chromedp.Evaluate[[]groupCell](readGroups))
	require.NoError(t, err)
	_, chargeReason := codec.ErrorGroup("charge order 1000: card declined")
	_, syncReason := codec.ErrorGroup("dial tcp 10.0.0.10:5432: connection refused")
	require.Equal(t, []groupCell{{chargeReason, "5"}, {syncReason, "3"}}, groups)
	require.Contains(t, chargeReason, "card declined")
	require.Contains(t, syncReason, "<addr>")

	if *updateScreenshot {
		png, err := chromedp.Run(browser, chromedp.CaptureScreenshot())
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(screenshotPath), 0o755))
		require.NoError(t, os.WriteFile(screenshotPath, png, 0o644))
		t.Logf("wrote %s (%d bytes)", screenshotPath, len(png))
	}

	// Replay the card-declined group: a confirmation, then the result.
	confirm := clickThrough(browser, t, groupButton("card declined", "Replay group"), "p.confirm")
	require.Contains(t, confirm, "about to replay 5 events")
	message := clickThrough(browser, t, chromedp.Search(`//form//button[contains(., "Yes, replay them")]`), "p.message")
	require.Contains(t, message, "Replayed 5 events")
	b.waitFor(t, "the relay delivered the 5 replayed events", func() bool { return b.relay.deliveredAll(chargeIDs) })
	b.waitFor(t, "the 5 replayed events are DONE", func() bool {
		rows := b.rows(t)
		for _, id := range chargeIDs {
			if rows[id].Status != int16(outbox.StatusDone) {
				return false
			}
		}
		return true
	})

	// Purge the connection-refused group, which is all the page lists now.
	before := b.rows(t)
	groups, err = chromedp.Run(browser, chromedp.Evaluate[[]groupCell](readGroups))
	require.NoError(t, err)
	require.Equal(t, []groupCell{{syncReason, "3"}}, groups)
	confirm = clickThrough(browser, t, groupButton("<addr>", "Purge group"), "p.confirm")
	require.Contains(t, confirm, "about to purge 3 events")
	message = clickThrough(browser, t, chromedp.Search(`//form//button[contains(., "Yes, purge them")]`), "p.message")
	require.Contains(t, message, "Purged 3 events")

	after := b.rows(t)
	want := maps.Clone(before)
	for _, id := range syncIDs {
		require.Contains(t, want, id)
		delete(want, id)
	}
	require.Equal(t, want, after, "the purge deletes the 3 events of its group and changes nothing else")
	require.Zero(t, b.countDead(t))
}

// clickThrough clicks sel, waits for the page it loads, and returns the
// text of the element wantCSS of that page.
func clickThrough(browser context.Context, t *testing.T, sel chromedp.Search, wantCSS string) string {
	t.Helper()
	resp, err := chromedp.RunResponse(browser, chromedp.Click(sel))
	require.NoError(t, err, "click %s", sel)
	require.Equal(t, int64(http.StatusOK), resp.Status, "the page after clicking %s", sel)
	text, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(wantCSS)))
	require.NoError(t, err)
	return text
}

// TestActionsRefused posts replays and purges without credentials and
// without the form token, with a plain HTTP client, and checks that they
// are refused and change no DEAD event.
func TestActionsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.publish(t, topicPayments, kindCharge, 0, 2)
	b.publish(t, topicLedger, kindSync, 0, 2)
	b.waitFor(t, "the 4 events are DEAD", func() bool { return b.countDead(t) == 4 })
	group, _ := codec.ErrorGroup("charge order 1000: card declined")

	// A GET with credentials sets the form token's cookie.
	req, err := http.NewRequestWithContext(b.ctx, http.MethodGet, b.base+"dead", http.NoBody)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	cookies := resp.Cookies()
	require.Len(t, cookies, 1)
	cookie := cookies[0]

	before := b.rows(t)
	for _, action := range []string{"replay", "purge"} {
		for _, c := range []struct {
			name          string
			authorization string
			cookie        bool
			csrf          string
			want          int
		}{
			{name: "no credentials", cookie: true, csrf: cookie.Value, want: http.StatusUnauthorized},
			{name: "wrong token", authorization: "Bearer nope", cookie: true, csrf: cookie.Value, want: http.StatusUnauthorized},
			{name: "no form token", authorization: "Bearer " + token, cookie: true, want: http.StatusForbidden},
			{name: "wrong form token", authorization: "Bearer " + token, cookie: true, csrf: strings.Repeat("A", 43), want: http.StatusForbidden},
			{name: "no cookie", authorization: "Bearer " + token, csrf: cookie.Value, want: http.StatusForbidden},
		} {
			form := url.Values{"group": {group}, "scope": {"all"}, "confirm": {"1"}}
			if c.csrf != "" {
				form.Set("csrf", c.csrf)
			}
			req, err := http.NewRequestWithContext(b.ctx, http.MethodPost, b.base+"dead/"+action, strings.NewReader(form.Encode()))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if c.authorization != "" {
				req.Header.Set("Authorization", c.authorization)
			}
			if c.cookie {
				req.AddCookie(cookie)
			}
			resp, err := noRedirects.Do(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, c.want, resp.StatusCode, "%s, %s", action, c.name)
			require.Equal(t, int64(4), b.countDead(t), "%s, %s", action, c.name)
		}
	}
	require.Equal(t, before, b.rows(t), "no refused request changes a row")

	// The same request with both credentials and the token acts: the
	// refusals above were for what they lacked.
	form := url.Values{"group": {group}, "scope": {"all"}, "confirm": {"1"}, "csrf": {cookie.Value}}
	req, err = http.NewRequestWithContext(b.ctx, http.MethodPost, b.base+"dead/purge", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+token)
	req.AddCookie(cookie)
	resp, err = noRedirects.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, int64(2), b.countDead(t))
}

// noRedirects is a client that returns redirects rather than following
// them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
	return http.ErrUseLastResponse
}}

// findChromium returns the browser's path: $CHROMIUM, or the first of the
// usual names on the PATH. Without one it skips the test, or fails it
// under CI=true.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		path, err := exec.LookPath(p)
		if err != nil {
			t.Fatalf("CHROMIUM=%s: %v", p, err)
		}
		return path
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	testenv.SkipOrFail(t, "no Chromium: set CHROMIUM, or put chromium, chromium-browser or google-chrome "+
		"on the PATH (Debian: apt-get install chromium)")
	return ""
}

// newBrowser starts a headless Chromium that sends the page's bearer
// token with every request, and returns the context of its tab. It stops
// at ctx's end or at the test's cleanup.
func newBrowser(ctx context.Context, t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.WindowSize(1280, 800),
	)
	if os.Geteuid() == 0 {
		// Chromium refuses to run as root with its sandbox on.
		opts = append(opts, chromedp.NoSandbox)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	err := chromedp.Do(browser,
		chromedp.EmulateViewport(1280, 800),
		chromedp.Func(func(ctx context.Context, target *chromedp.Target) error {
			_, err := cdp.Call(ctx, target, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
				Headers: network.Headers{"Authorization": "Bearer " + token},
			})
			return err
		}),
	)
	if err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return browser
}
