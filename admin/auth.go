package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
)

// BearerToken returns an authorizer for Config.Authorize that accepts the
// requests carrying "Authorization: Bearer <token>", compared in constant
// time, and names their user "bearer". An empty token accepts nothing.
// Browsers do not send bearer tokens on their own: use it behind a proxy
// that adds the header, or for scripts.
func BearerToken(token string) func(*http.Request) (string, bool) {
	want := sha256.Sum256([]byte(token))
	return func(r *http.Request) (string, bool) {
		scheme, got, found := strings.Cut(r.Header.Get("Authorization"), " ")
		if token == "" || !found || !strings.EqualFold(scheme, "Bearer") {
			return "", false
		}
		sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
		if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			return "", false
		}
		return "bearer", true
	}
}

// BasicAuth returns an authorizer for Config.Authorize that accepts HTTP
// basic authentication as user with password pass, both compared in
// constant time, and names the request's user user. An empty password
// accepts nothing. Set Config.Challenge to [BasicChallenge] with it, so
// that browsers ask for the password; and serve the page over HTTPS only,
// since basic authentication sends the password with every request.
func BasicAuth(user, pass string) func(*http.Request) (string, bool) {
	wantUser, wantPass := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(pass))
	return func(r *http.Request) (string, bool) {
		u, p, ok := r.BasicAuth()
		if !ok || pass == "" {
			return "", false
		}
		gotUser, gotPass := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		// Both compared, always: the time taken does not tell which was
		// wrong.
		userOK := subtle.ConstantTimeCompare(gotUser[:], wantUser[:])
		passOK := subtle.ConstantTimeCompare(gotPass[:], wantPass[:])
		if userOK&passOK != 1 {
			return "", false
		}
		return user, true
	}
}

// BasicChallenge is the Config.Challenge that goes with [BasicAuth].
const BasicChallenge = `Basic realm="wmoutbox admin", charset="UTF-8"`

// authorize applies Config.Authorize to r, or the loopback rule without
// one, and answers a refused request itself.
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request) (user string, ok bool) {
	if h.cfg.Authorize == nil {
		if !isLoopback(r.RemoteAddr) {
			h.log.WarnContext(r.Context(), "wmoutbox admin: refused a request from beyond the local host "+
				"to a page without an authorizer", "remote", r.RemoteAddr)
			h.fail(w, r, http.StatusForbidden, "This page answers the local host only: it has no authorizer.")
			return "", false
		}
		return "local", true
	}
	user, ok = h.cfg.Authorize(r)
	if !ok {
		if h.cfg.Challenge != "" {
			w.Header().Set("WWW-Authenticate", h.cfg.Challenge)
		}
		h.fail(w, r, http.StatusUnauthorized, "Unauthorized.")
		return "", false
	}
	if user == "" {
		user = "unnamed"
	}
	return user, true
}

// isLoopback reports whether a RemoteAddr is on the loopback network.
func isLoopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return ip != nil && ip.IsLoopback()
}
