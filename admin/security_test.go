package admin_test

import (
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/admin"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// confirmed is the form of a confirmed replay of one DEAD event: what a
// forged request would send.
var confirmed = url.Values{"id": {"01A"}, "scope": {"selected"}, "confirm": {"1"}}

func TestCSRF(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		// field is the form's token; cookie, when false, drops the cookie.
		field  func(tok string) string
		cookie bool
		mod    func(*http.Request)
	}{
		"no token":           {field: func(string) string { return "" }, cookie: true},
		"a wrong token":      {field: func(tok string) string { return strings.Repeat("A", len(tok)) }, cookie: true},
		"no cookie":          {field: func(tok string) string { return tok }, cookie: false},
		"a cross-site fetch": {field: func(tok string) string { return tok }, cookie: true, mod: func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") }},
		"a sibling subdomain": {field: func(tok string) string { return tok }, cookie: true, mod: func(r *http.Request) {
			r.Header.Set("Sec-Fetch-Site", "same-site")
		}},
		"another origin, old browser": {field: func(tok string) string { return tok }, cookie: true, mod: func(r *http.Request) {
			r.Header.Del("Sec-Fetch-Site")
			r.Header.Set("Origin", "https://evil.example")
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, testConfig(), someEvents()...)
			br := newBrowser(t, b.h)
			tok := token(t, br.get("/dead", http.StatusOK))
			before := b.store.snapshot()
			if !tc.cookie {
				clear(br.cookies)
			}
			form := cloneValues(confirmed)
			if f := tc.field(tok); f != "" {
				form.Set("csrf", f)
			}
			var mods []func(*http.Request)
			if tc.mod != nil {
				mods = append(mods, tc.mod)
			}
			w := br.do(http.MethodPost, "/dead/replay", form, mods...)
			require.Equal(t, http.StatusForbidden, w.Code, w.Body.String())
			require.Equal(t, before, b.store.snapshot())
			require.Empty(t, b.store.replays)
			require.Contains(t, b.logs.String(), "refused a POST")
		})
	}

	// The control: the same request with the page's token acts.
	b := setup(t, testConfig(), someEvents()...)
	br := newBrowser(t, b.h)
	w := br.post("/dead/replay", confirmed, token(t, br.get("/dead", http.StatusOK)))
	require.Equal(t, http.StatusSeeOther, w.Code)
	require.Len(t, b.store.replays, 1)
}

func TestCSRFCookie(t *testing.T) {
	t.Parallel()
	b := setup(t, testConfig(), someEvents()...)
	br := newBrowser(t, b.h)
	w := br.do(http.MethodGet, "/dead", nil)
	cookies := w.Result().Cookies()
	require.Len(t, cookies, 1)
	c := cookies[0]
	require.True(t, c.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, c.SameSite)
	require.Equal(t, "/", c.Path)
	require.Equal(t, c.Value, token(t, w.Body.String()))
	// The next page keeps the token: open tabs stay valid.
	w = br.do(http.MethodGet, "/pending", nil)
	require.Empty(t, w.Result().Cookies())
	require.Equal(t, c.Value, token(t, br.get("/events/01A", http.StatusOK)))
}

func TestTrustedOrigin(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.TrustedOrigins = []string{"https://ops.example.com"}
	b := setup(t, cfg, someEvents()...)
	br := newBrowser(t, b.h)
	tok := token(t, br.get("/dead", http.StatusOK))
	form := cloneValues(confirmed)
	form.Set("csrf", tok)
	w := br.do(http.MethodPost, "/dead/replay", form, func(r *http.Request) {
		r.Header.Set("Sec-Fetch-Site", "cross-site")
		r.Header.Set("Origin", "https://ops.example.com")
	})
	require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
}

func TestUnauthorized(t *testing.T) {
	t.Parallel()
	b := setup(t, testConfig(), someEvents()...)
	br := newBrowser(t, b.h)
	tok := token(t, br.get("/dead", http.StatusOK))
	before := b.store.snapshot()
	queries := len(b.store.groupQueries)

	for name, auth := range map[string]func(*http.Request){
		"no credentials":   nil,
		"a wrong password": func(r *http.Request) { r.SetBasicAuth("ops", "guess") },
		"a wrong user":     func(r *http.Request) { r.SetBasicAuth("root", "s3cret") },
		"a bearer token":   func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") },
	} {
		br.auth = auth
		for _, path := range []string{"/", "/dead", "/events/01A", "/static/admin.css"} {
			w := br.do(http.MethodGet, path, nil)
			require.Equal(t, http.StatusUnauthorized, w.Code, "%s: %s", name, path)
			require.Equal(t, admin.BasicChallenge, w.Header().Get("WWW-Authenticate"))
			require.NotContains(t, w.Body.String(), "01A", "%s: %s", name, path)
		}
		form := cloneValues(confirmed)
		form.Set("csrf", tok)
		w := br.do(http.MethodPost, "/dead/replay", form)
		require.Equal(t, http.StatusUnauthorized, w.Code, name)
	}
	require.Equal(t, before, b.store.snapshot())
	require.Empty(t, b.store.replays)
	require.Len(t, b.store.groupQueries, queries, "an unauthorized request reached the store")
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	b := setup(t, admin.Config{Authorize: admin.BearerToken("t0ken")}, someEvents()...)
	br := newBrowser(t, b.h)
	br.auth = func(r *http.Request) { r.Header.Set("Authorization", "Bearer t0ken") }
	require.Contains(t, br.get("/", http.StatusOK), `<span class="user">bearer</span>`)

	for _, h := range []string{"", "Bearer", "Bearer t0ke", "Bearer t0ken2", "Basic t0ken"} {
		br.auth = func(r *http.Request) { r.Header.Set("Authorization", h) }
		w := br.do(http.MethodGet, "/", nil)
		require.Equal(t, http.StatusUnauthorized, w.Code, h)
		require.Empty(t, w.Header().Get("WWW-Authenticate"), "no challenge unless configured")
	}

	// An empty token accepts nothing, not an empty header.
	b = setup(t, admin.Config{Authorize: admin.BearerToken("")})
	br = newBrowser(t, b.h)
	br.auth = func(r *http.Request) { r.Header.Set("Authorization", "Bearer ") }
	require.Equal(t, http.StatusUnauthorized, br.do(http.MethodGet, "/", nil).Code)
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.ReadOnly = true
	b := setup(t, cfg, someEvents()...)
	br := newBrowser(t, b.h)

	for _, path := range []string{"/dead", "/dead?group=g-timeout", "/events/01A"} {
		body := br.get(path, http.StatusOK)
		require.NotContains(t, body, "Replay", path)
		require.NotContains(t, body, "Purge", path)
		require.NotContains(t, body, `method="post"`, path)
		require.NotContains(t, body, `type="checkbox"`, path)
		require.Contains(t, body, "read-only", path)
	}
	require.Empty(t, br.cookies, "a read-only page needs no form token")

	// A POST is refused even with a good token from a writable page.
	b2 := setup(t, testConfig(), someEvents()...)
	tok := token(t, newBrowser(t, b2.h).get("/dead", http.StatusOK))
	before := b.store.snapshot()
	for _, path := range []string{"/dead/replay", "/dead/purge"} {
		w := br.post(path, confirmed, tok)
		require.Equal(t, http.StatusForbidden, w.Code)
		require.Contains(t, w.Body.String(), "read-only")
	}
	require.Equal(t, before, b.store.snapshot())
	require.Empty(t, b.store.replays)
	require.Empty(t, b.store.purges)
}

func TestReadOnlyWithoutAuthorizer(t *testing.T) {
	t.Parallel()
	b := setup(t, admin.Config{ReadOnly: true}, someEvents()...)
	br := newBrowser(t, b.h)
	br.auth = nil
	for _, remote := range []string{"192.0.2.10:40000", "10.0.0.1:1", "[2001:db8::1]:80", "", "localhost:80"} {
		br.remote = remote
		w := br.do(http.MethodGet, "/dead", nil)
		require.Equal(t, http.StatusForbidden, w.Code, remote)
		require.NotContains(t, w.Body.String(), "01A")
	}
	require.Empty(t, b.store.deadQueries)
	for _, remote := range []string{"127.0.0.1:5000", "127.8.9.10:1", "[::1]:5000"} {
		br.remote = remote
		require.Contains(t, br.get("/dead", http.StatusOK), "01A", remote)
	}
	br.remote = "127.0.0.1:5000"
	w := br.do(http.MethodPost, "/dead/replay", confirmed)
	require.Equal(t, http.StatusForbidden, w.Code)
	require.Empty(t, b.store.replays)
}

func TestHidePayloads(t *testing.T) {
	t.Parallel()
	const marker = "PERSONAL-DATA-4711"
	ev := deadEvent("01A", "orders", "g", "boom", 1)
	ev.PayloadJSON = []byte(`{"email":"` + marker + `"}`)
	ev.Headers = map[string]string{"customer": marker}
	bin := pendingEvent("02A", "orders", outbox.StatusNew)
	bin.PayloadBytes = []byte(marker)

	cfg := testConfig()
	cfg.HidePayloads = true
	b := setup(t, cfg, ev, bin)
	br := newBrowser(t, b.h)
	for _, path := range []string{"/events/01A", "/events/02A", "/dead", "/pending", "/"} {
		body := br.get(path, http.StatusOK)
		require.NotContains(t, body, marker, path)
		require.NotContains(t, body, hexOf(marker), path)
	}
	body := br.get("/events/01A", http.StatusOK)
	require.Contains(t, body, "<td>customer</td><td>18 bytes (hidden)</td>")
	require.Contains(t, body, "JSON, 30 bytes")
	require.Contains(t, body, "Payloads are hidden")

	// The control: shown without HidePayloads.
	b = setup(t, testConfig(), ev)
	require.Contains(t, newBrowser(t, b.h).get("/events/01A", http.StatusOK), marker)
}

func hexOf(s string) string {
	var b strings.Builder
	for i := range len(s) {
		if i > 0 {
			b.WriteByte(' ')
		}
		const digits = "0123456789abcdef"
		b.WriteByte(digits[s[i]>>4])
		b.WriteByte(digits[s[i]&15])
	}
	return b.String()[:20]
}

func TestHostileContentIsEscaped(t *testing.T) {
	t.Parallel()
	const evil = `<script>alert(1)</script>`
	ev := deadEvent("01A", evil, "g\"><script>x</script>", "failed: "+evil, 1)
	ev.Type = `"><img src=x onerror=alert(1)>`
	ev.Headers = map[string]string{evil: evil}
	ev.PayloadJSON = []byte(`{"x":"` + evil + `"}`)
	ev.AggregateType, ev.AggregateID = outbox.AggregateType(evil), " "+evil+`&aggid=other"/../# `
	b := setup(t, testConfig(), ev)
	br := newBrowser(t, b.h)
	aggregate := "/aggregates?aggtype=" + url.QueryEscape(string(ev.AggregateType)) + "&aggid=" + url.QueryEscape(ev.AggregateID) +
		"&topic=" + url.QueryEscape(evil)
	for _, path := range []string{"/", "/dead", "/dead?topic=" + url.QueryEscape(evil), "/events/01A", "/pending?topic=" + url.QueryEscape(evil), aggregate} {
		body := br.get(path, http.StatusOK)
		require.NotContains(t, body, "<script>alert", path)
		require.NotContains(t, body, "<script>x", path)
		require.NotContains(t, body, "<img", path)
	}
	require.Contains(t, br.get("/dead", http.StatusOK), "&lt;script&gt;alert(1)&lt;/script&gt;")
	// The event's link to its aggregate carries the id whole: the page
	// it leads to lists the event.
	ref := hrefTo(t, br.get("/events/01A", http.StatusOK), html.EscapeString(string(ev.AggregateType)+" / "+ev.AggregateID))
	require.Contains(t, br.get(resolve(t, "/events/01A", ref), http.StatusOK), `<a href="./events/01A">01A</a>`)
	require.Equal(t, ev.AggregateID, b.store.aggQueries[len(b.store.aggQueries)-1].ID)
	// A result message is a fixed sentence: a link cannot write on the
	// page.
	body := br.get("/dead?did=replay&n=1%3Cb%3E", http.StatusOK)
	require.NotContains(t, body, "Replayed")
}

func TestMountedUnderAPrefix(t *testing.T) {
	t.Parallel()
	b := setup(t, testConfig(), append(someEvents(), aggregateEvents()...)...)
	mux := http.NewServeMux()
	mux.Handle("/ops/outbox/", http.StripPrefix("/ops/outbox", b.h))
	br := newBrowser(t, mux)

	// Every link, source and form of every page stays under the prefix.
	for _, page := range []string{"/ops/outbox/", "/ops/outbox/dead", "/ops/outbox/dead?group=g-timeout",
		"/ops/outbox/events/01A", "/ops/outbox/pending?status=NEW", "/ops/outbox/aggregates",
		"/ops/outbox/aggregates?aggtype=order&aggid=o-7&limit=2",
		"/ops/outbox/aggregates?aggtype=order&aggid=o-7&limit=2&before=2026-11-29T12%3A03%3A00Z%2F03D"} {
		body := br.get(page, http.StatusOK)
		all := refs(body)
		require.NotEmpty(t, all)
		for _, ref := range all {
			require.False(t, strings.HasPrefix(ref, "/"), "absolute link %q on %s", ref, page)
			got := resolve(t, page, ref)
			require.True(t, strings.HasPrefix(got, "/ops/outbox/"), "%q on %s leads to %s", ref, page, got)
			if !strings.Contains(ref, "dead/") { // the forms' targets take POSTs only
				br.get(got, http.StatusOK)
			}
		}
	}

	// The confirmation and the redirect after the action too.
	page := "/ops/outbox/events/01A"
	tok := token(t, br.get(page, http.StatusOK))
	form := url.Values{"id": {"01A"}, "scope": {"selected"}, "return": {"event"}}
	w := br.post(resolve(t, page, "../dead/purge"), form, tok)
	require.Equal(t, http.StatusOK, w.Code)
	for _, ref := range refs(w.Body.String()) {
		require.True(t, strings.HasPrefix(resolve(t, "/ops/outbox/dead/purge", ref), "/ops/outbox/"), ref)
	}
	form.Set("confirm", "1")
	w = br.post("/ops/outbox/dead/purge", form, tok)
	require.Equal(t, http.StatusSeeOther, w.Code)
	next := resolve(t, "/ops/outbox/dead/purge", w.Header().Get("Location"))
	require.Equal(t, "/ops/outbox/dead?did=purge&n=1", next)
	require.Contains(t, br.get(next, http.StatusOK), "Purged 1 event.")

	// The mount point without its slash leads to the overview: the
	// mux's redirect, or the handler's own when it sees an empty path.
	w = br.do(http.MethodGet, "/ops/outbox", nil)
	require.Equal(t, "/ops/outbox/", resolve(t, "/ops/outbox", w.Header().Get("Location")))
	br = newBrowser(t, http.StripPrefix("/ops/outbox", b.h))
	w = br.do(http.MethodGet, "/ops/outbox", nil)
	require.Equal(t, http.StatusMovedPermanently, w.Code)
	require.Equal(t, "/ops/outbox/", resolve(t, "/ops/outbox", w.Header().Get("Location")))
}
