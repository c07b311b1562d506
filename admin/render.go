package admin

import (
	"bytes"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/wmoutbox/wmoutbox/outbox"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var embedded embed.FS

// staticFS holds the stylesheet and the script the pages load.
var staticFS, _ = fs.Sub(embedded, "static")

// pages are the templates, one per page, each with the layout.
var pages = parsePages("overview", "dead", "confirm", "event", "pending", "aggregate", "error")

func parsePages(names ...string) map[string]*template.Template {
	funcs := template.FuncMap{
		"time":  fmtTime,
		"num":   fmtNumber,
		"short": shorten,
		// eventsTable is the argument of the events template: the rows,
		// whether they have checkboxes, and which time the time column
		// shows: "Due" (pending), "Updated" (dead: when they died) or
		// "Created" (an aggregate's, in their order).
		"eventsTable": func(events []eventRow, selectable bool, column string) any {
			return struct {
				Events []eventRow
				Select bool
				Time   string
			}{events, selectable, column}
		},
	}
	m := make(map[string]*template.Template, len(names))
	for _, name := range names {
		m[name] = template.Must(template.New("layout.html").Funcs(funcs).
			ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	return m
}

// page is what the layout shows around every page's content.
type page struct {
	App, Title string
	// Base is the way from the page to the root of the handler, "./" or
	// "../": every link is relative, so the pages work under any mount
	// path.
	Base         string
	Nav          string
	CSRF         string
	User         string
	ReadOnly     bool
	HidePayloads bool
	// Message reports the outcome of the action that redirected here.
	Message string
	// Data is the page's own.
	Data any
}

// newPage returns the frame of a page for r.
func (h *Handler) newPage(w http.ResponseWriter, r *http.Request, nav, title string) *page {
	p := &page{
		App: h.cfg.Title, Title: title, Base: base(r), Nav: nav, User: userOf(r),
		ReadOnly: h.cfg.ReadOnly, HidePayloads: h.cfg.HidePayloads,
	}
	if !h.cfg.ReadOnly {
		p.CSRF = csrfToken(w, r)
	}
	return p
}

// render writes the page named name with status code.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, code int, name string, p *page) {
	var buf bytes.Buffer
	if err := pages[name].Execute(&buf, p); err != nil {
		h.log.ErrorContext(r.Context(), "wmoutbox admin: rendering a page", "page", name, "error", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// fail renders the error page with code and message.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, code int, message string) {
	p := &page{App: h.cfg.Title, Title: http.StatusText(code), Base: base(r), Data: message}
	h.render(w, r, code, "error", p)
}

// storeFailed logs a store error and renders it with 500.
func (h *Handler) storeFailed(w http.ResponseWriter, r *http.Request, op string, err error) {
	h.log.ErrorContext(r.Context(), "wmoutbox admin: store error", "op", op, "user", userOf(r), "error", err)
	h.fail(w, r, http.StatusInternalServerError, "The store failed to "+op+": "+err.Error())
}

func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.fail(w, r, http.StatusNotFound, "No such page.")
}

// base returns the relative way from r's page to the handler's root.
func base(r *http.Request) string {
	if n := strings.Count(r.URL.EscapedPath(), "/") - 1; n > 0 {
		return strings.Repeat("../", n)
	}
	return "./"
}

// rootRedirect returns where to send a request for the root without its
// slash: its last path segment with a slash, relative.
func rootRedirect(r *http.Request) string {
	path := r.RequestURI
	if u, err := url.ParseRequestURI(path); err == nil {
		path = u.EscapedPath()
	}
	last := path[strings.LastIndexByte(path, '/')+1:]
	if last == "" {
		return "./"
	}
	return last + "/"
}

// redirect answers with a relative Location: http.Redirect would resolve
// it against the path after the mount prefix was stripped.
func redirect(w http.ResponseWriter, location string, code int) {
	w.Header().Set("Location", location)
	w.WriteHeader(code)
}

// link returns a relative link to the handler's path under base, with the
// query v.
func link(base, path string, v url.Values) string {
	if q := v.Encode(); q != "" {
		return base + path + "?" + q
	}
	return base + path
}

// aggregateLink returns the link to the page of an aggregate's events.
func aggregateLink(base string, typ outbox.AggregateType, id string) string {
	return link(base, "aggregates", url.Values{pAggType: {string(typ)}, pAggID: {id}})
}

// eventLink returns the link to an event's page.
func eventLink(base, id string) string {
	return base + "events/" + url.PathEscape(id)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
}

// fmtAge formats a duration for a person: seconds below a minute, then
// rounded to the second.
func fmtAge(d time.Duration) string {
	if d < time.Minute {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// fmtNumber formats an integer with thousands separators.
func fmtNumber(n any) string {
	switch n := n.(type) {
	case int:
		return fmtNum(int64(n))
	case int64:
		return fmtNum(n)
	}
	return fmt.Sprint(n)
}

// fmtNum formats n with thousands separators.
func fmtNum(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// shorten cuts s to n runes, with an ellipsis when it cut.
func shorten(n int, s string) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// payloadView is a payload as the event page shows it.
type payloadView struct {
	// Kind is "JSON" or "bytes".
	Kind string
	Size int
	// Text is the payload, indented when JSON, a hex dump otherwise; ""
	// when hidden.
	Text string
	// Shown is how many of the payload's bytes Text shows, less than Size
	// when the payload was cut.
	Shown int
}

// viewPayload returns the view of a payload, cut to limit bytes; only its
// size when hide is set.
func viewPayload(jsonPayload, bytesPayload []byte, limit int, hide bool) payloadView {
	v := payloadView{Kind: "bytes", Size: len(bytesPayload)}
	data := bytesPayload
	if jsonPayload != nil {
		v.Kind, v.Size, data = "JSON", len(jsonPayload), jsonPayload
	}
	if hide {
		return v
	}
	if len(data) > limit {
		data = data[:limit]
	}
	v.Shown = len(data)
	if v.Kind == "JSON" {
		var buf bytes.Buffer
		if v.Shown == v.Size && json.Indent(&buf, data, "", "  ") == nil {
			v.Text = buf.String()
			return v
		}
		if utf8.Valid(trimPartialRune(data)) {
			// Cut, so not valid JSON any more: shown as written.
			v.Text = string(trimPartialRune(data))
			v.Shown = len(v.Text)
			return v
		}
	}
	v.Text = hex.Dump(data)
	return v
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of b, left
// by a cut; invalid bytes stay, for the caller to see.
func trimPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			return b
		}
	}
	return b
}
