package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// Store is what the pages read and change: the operator methods of
// *outbox.Store, which every dialect's store is (*postgres.Store,
// *mysql.Store, *sqlite.Store). A fake of your own serves for tests; it
// must be safe for concurrent use, as the overview calls Stats and
// DeadGroups at once.
type Store interface {
	// Stats reads the counts by topic and status and the claims in
	// flight: the overview.
	Stats(ctx context.Context) (outbox.Stats, error)
	// DeadGroups groups DEAD events by failure reason.
	DeadGroups(ctx context.Context, q outbox.DeadGroupQuery) ([]outbox.DeadGroup, error)
	// QueryDead pages through DEAD events by id.
	QueryDead(ctx context.Context, q outbox.DeadQuery) ([]outbox.Event, error)
	// CountDead counts DEAD events matching a filter.
	CountDead(ctx context.Context, f outbox.DeadFilter) (int64, error)
	// QueryPending pages through NEW and RETRY events by id.
	QueryPending(ctx context.Context, q outbox.PendingQuery) ([]outbox.Event, error)
	// AggregateEvents pages through one aggregate's events, newest
	// first.
	AggregateEvents(ctx context.Context, q outbox.AggregateQuery) (outbox.AggregatePage, error)
	// Get reads one event; an error matching outbox.ErrNotFound when
	// there is none.
	Get(ctx context.Context, id string) (outbox.Event, error)
	// ReplayDead returns DEAD events matching a filter to NEW.
	ReplayDead(ctx context.Context, f outbox.DeadFilter) (int64, error)
	// PurgeDead deletes DEAD events matching a filter.
	PurgeDead(ctx context.Context, f outbox.DeadFilter) (int64, error)
}

// Config configures a [Handler]. Its zero value is refused by [New]: set
// Authorize, or ReadOnly for a page served to the local host only.
type Config struct {
	// Authorize decides whether a request may see the pages, and names its
	// user for the action log. [BearerToken] and [BasicAuth] build one; a
	// function of your own can check a session or a header set by an
	// authenticating proxy. A request it refuses gets 401 and changes
	// nothing. It is required unless ReadOnly is set.
	Authorize func(r *http.Request) (user string, ok bool)
	// Challenge is the WWW-Authenticate header of 401 responses, so that a
	// browser asks for credentials: set it to [BasicChallenge] with
	// [BasicAuth]. Default: none.
	Challenge string
	// ReadOnly hides the replay and purge buttons and refuses every POST
	// (403). Without Authorize, ReadOnly is required, and then every
	// request whose RemoteAddr is not a loopback address gets 403: a
	// handler cannot know where it is served, so an unauthenticated page
	// answers the local host only. Behind a reverse proxy on the same host
	// every request comes from loopback: set Authorize there.
	ReadOnly bool
	// HidePayloads never renders payloads or header values, only their
	// sizes (and the header names), for tables that hold personal data.
	HidePayloads bool
	// PageSize is the number of events a page lists, and of failure
	// groups the dead-letter page shows. Default 50, at most 1000; the
	// page's limit parameter can ask for up to 1000.
	PageSize int
	// PayloadLimit is how many bytes of a payload the event page shows;
	// the rest is cut with a note. Default 64 KiB.
	PayloadLimit int
	// TrustedOrigins are origins ("https://ops.example.com") whose
	// cross-origin POSTs are accepted, for a page served under another
	// host name than the one the browser posts from (a proxy rewriting
	// Host). Default: none; same-origin POSTs are always accepted.
	TrustedOrigins []string
	// Logger receives the action log (every replay and purge: who, the
	// filter, how many events) at Info, and store errors at Error.
	// Default: slog.Default().
	Logger *slog.Logger
	// Title is shown in the page header. Default "wmoutbox".
	Title string
}

// Defaults and limits of [Config].
const (
	DefaultPageSize     = 50
	MaxPageSize         = 1000
	DefaultPayloadLimit = 64 << 10
)

// ErrNoAuthorizer is returned by [New] for a Config with neither Authorize
// nor ReadOnly: a page that replays and purges events must know who asks.
var ErrNoAuthorizer = errors.New("admin: Config.Authorize is required unless Config.ReadOnly is set " +
	"(a read-only page without an authorizer answers loopback requests only)")

// Handler serves the dashboard. It is an [http.Handler], safe for
// concurrent use, and keeps no state between requests.
type Handler struct {
	store Store
	cfg   Config
	log   *slog.Logger
	mux   *http.ServeMux
	cop   *http.CrossOriginProtection
}

// New returns the handler of the pages over store. It fails with
// [ErrNoAuthorizer] when cfg has neither Authorize nor ReadOnly, and with
// a descriptive error for a store that is nil or a field out of range.
func New(store Store, cfg Config) (*Handler, error) {
	if store == nil {
		return nil, errors.New("admin: nil Store")
	}
	if cfg.Authorize == nil && !cfg.ReadOnly {
		return nil, ErrNoAuthorizer
	}
	switch {
	case cfg.PageSize < 0 || cfg.PageSize > MaxPageSize:
		return nil, fmt.Errorf("admin: Config.PageSize %d out of range 0..%d", cfg.PageSize, MaxPageSize)
	case cfg.PageSize == 0:
		cfg.PageSize = DefaultPageSize
	}
	switch {
	case cfg.PayloadLimit < 0:
		return nil, fmt.Errorf("admin: negative Config.PayloadLimit %d", cfg.PayloadLimit)
	case cfg.PayloadLimit == 0:
		cfg.PayloadLimit = DefaultPayloadLimit
	}
	if cfg.Title == "" {
		cfg.Title = "wmoutbox"
	}
	h := &Handler{store: store, cfg: cfg, log: cfg.Logger, cop: http.NewCrossOriginProtection()}
	if h.log == nil {
		h.log = slog.Default()
	}
	for _, o := range cfg.TrustedOrigins {
		if err := h.cop.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("admin: Config.TrustedOrigins: %w", err)
		}
	}
	h.mux = http.NewServeMux()
	h.mux.HandleFunc("GET /{$}", h.overview)
	h.mux.HandleFunc("GET /dead", h.dead)
	h.mux.HandleFunc("POST /dead/{action}", h.action)
	h.mux.HandleFunc("GET /events/{id}", h.event)
	h.mux.HandleFunc("GET /pending", h.pending)
	h.mux.HandleFunc("GET /aggregates", h.aggregate)
	for _, name := range []string{"admin.css", "admin.js"} {
		h.mux.HandleFunc("GET /static/"+name, func(w http.ResponseWriter, r *http.Request) {
			http.ServeFileFS(w, r, staticFS, name)
		})
	}
	h.mux.HandleFunc("/", h.notFound)
	return h, nil
}

// ServeHTTP sets the security headers, authorizes the request, checks a
// POST against cross-site forgery, and serves the page.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Cache-Control", "no-store")

	user, ok := h.authorize(w, r)
	if !ok {
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
	if r.URL.Path == "" {
		// Mounted so that the root lost its slash (StripPrefix of the
		// whole path): the relative links need it back.
		redirect(w, rootRedirect(r), http.StatusMovedPermanently)
		return
	}
	if r.Method == http.MethodPost {
		if h.cfg.ReadOnly {
			h.fail(w, r, http.StatusForbidden, "This page is read-only: it replays and purges nothing.")
			return
		}
		if err := h.checkCSRF(w, r); err != nil {
			h.log.WarnContext(r.Context(), "wmoutbox admin: refused a POST", "user", user, "remote", r.RemoteAddr,
				"path", r.URL.Path, "reason", err.Error())
			h.fail(w, r, http.StatusForbidden, "Refused: "+err.Error()+". Reload the page and try again.")
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

type userKey struct{}

// userOf returns the user Authorize named for r.
func userOf(r *http.Request) string {
	u, _ := r.Context().Value(userKey{}).(string)
	return u
}
