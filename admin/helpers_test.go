package admin_test

import (
	"bytes"
	"html"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/admin"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// bundle is a handler over a fake store, with its action log.
type bundle struct {
	store *fakeStore
	h     http.Handler
	logs  *bytes.Buffer
}

// testConfig is the Config of most tests: basic authentication of ops.
func testConfig() admin.Config {
	return admin.Config{Authorize: admin.BasicAuth("ops", "s3cret"), Challenge: admin.BasicChallenge}
}

// setup returns a handler over a fake store holding events; cfg's Logger
// is replaced by one the bundle keeps.
func setup(t *testing.T, cfg admin.Config, events ...outbox.Event) *bundle {
	t.Helper()
	b := &bundle{store: newFakeStore(events...), logs: &bytes.Buffer{}}
	cfg.Logger = slog.New(slog.NewTextHandler(&syncWriter{w: b.logs}, nil))
	h, err := admin.New(b.store, cfg)
	require.NoError(t, err)
	b.h = h
	return b
}

// syncWriter guards a buffer written by concurrent requests.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// browser sends requests to a handler as a browser on its page would:
// with its cookies, its credentials, and same-origin POSTs.
type browser struct {
	t       *testing.T
	h       http.Handler
	cookies map[string]*http.Cookie
	// auth adds the credentials; nil sends none.
	auth   func(*http.Request)
	remote string
}

func newBrowser(t *testing.T, h http.Handler) *browser {
	return &browser{
		t: t, h: h, cookies: map[string]*http.Cookie{}, remote: "192.0.2.10:40000",
		auth: func(r *http.Request) { r.SetBasicAuth("ops", "s3cret") },
	}
}

// do sends a request; form, when not nil, as a POST body. mods change the
// request last.
func (b *browser) do(method, target string, form url.Values, mods ...func(*http.Request)) *httptest.ResponseRecorder {
	b.t.Helper()
	var r *http.Request
	if form != nil {
		r = httptest.NewRequest(method, target, strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Origin", "http://example.com")
		r.Header.Set("Sec-Fetch-Site", "same-origin")
	} else {
		r = httptest.NewRequest(method, target, http.NoBody)
	}
	r.RemoteAddr = b.remote
	for _, c := range b.cookies {
		r.AddCookie(c)
	}
	if b.auth != nil {
		b.auth(r)
	}
	for _, m := range mods {
		m(r)
	}
	w := httptest.NewRecorder()
	b.h.ServeHTTP(w, r)
	for _, c := range w.Result().Cookies() {
		b.cookies[c.Name] = c
	}
	return w
}

// get fetches a page and requires want.
func (b *browser) get(target string, want int) string {
	b.t.Helper()
	w := b.do(http.MethodGet, target, nil)
	require.Equal(b.t, want, w.Code, "GET %s: %s", target, w.Body.String())
	return w.Body.String()
}

// post sends form with the page's CSRF token.
func (b *browser) post(target string, form url.Values, token string) *httptest.ResponseRecorder {
	b.t.Helper()
	form = cloneValues(form)
	form.Set("csrf", token)
	return b.do(http.MethodPost, target, form)
}

func cloneValues(v url.Values) url.Values {
	c := url.Values{}
	for k, vs := range v {
		c[k] = append([]string(nil), vs...)
	}
	return c
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token returns the CSRF token of a page's forms.
func token(t *testing.T, body string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(t, m, "no CSRF field in the page")
	return m[1]
}

var refRE = regexp.MustCompile(`(?:href|src|action|formaction)="([^"]*)"`)

// refs returns the links, sources and form actions of a page, unescaped.
func refs(body string) []string {
	var out []string
	for _, m := range refRE.FindAllStringSubmatch(body, -1) {
		out = append(out, html.UnescapeString(m[1]))
	}
	return out
}

// hrefTo returns the first link of a page whose text is text.
func hrefTo(t *testing.T, body, text string) string {
	t.Helper()
	re := regexp.MustCompile(`<a href="([^"]*)"[^>]*>` + regexp.QuoteMeta(text) + `</a>`)
	m := re.FindStringSubmatch(body)
	require.NotNil(t, m, "no link %q in the page", text)
	return html.UnescapeString(m[1])
}

// resolve returns ref resolved against the page at page.
func resolve(t *testing.T, page, ref string) string {
	t.Helper()
	base, err := url.Parse(page)
	require.NoError(t, err)
	u, err := base.Parse(ref)
	require.NoError(t, err)
	return u.RequestURI()
}
