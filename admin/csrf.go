package admin

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
)

// Cross-site request forgery protection, without server state: a random
// token lives in a SameSite=Strict, HttpOnly cookie and in a hidden field
// of every form (a double-submit cookie); a POST must carry both, equal.
// A page elsewhere can neither read the cookie nor set it for this origin,
// so it cannot fill the field. On top of that, [http.CrossOriginProtection]
// refuses POSTs that the browser marks as cross-origin (Sec-Fetch-Site) or
// whose Origin is not the request's host (or a Config.TrustedOrigins).

const (
	csrfCookie = "wmoutbox_admin_csrf"
	csrfField  = "csrf"
	csrfBytes  = 32
)

var (
	errNoCSRFCookie  = errors.New("no form token cookie")
	errBadCSRFToken  = errors.New("missing or wrong form token")
	errCSRFMalformed = errors.New("malformed form")
)

// checkCSRF returns why a POST is refused, nil when it is not.
func (h *Handler) checkCSRF(w http.ResponseWriter, r *http.Request) error {
	if err := h.cop.Check(r); err != nil {
		return err
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || !validToken(c.Value) {
		return errNoCSRFCookie
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		return errCSRFMalformed
	}
	got := r.PostForm.Get(csrfField)
	if subtle.ConstantTimeCompare([]byte(got), []byte(c.Value)) != 1 {
		return errBadCSRFToken
	}
	return nil
}

// maxFormBytes bounds a POST's body: a thousand ids and the filter fit.
const maxFormBytes = 1 << 20

// csrfToken returns the request's form token, from its cookie, or a new
// one set as a cookie on w.
func csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && validToken(c.Value) {
		return c.Value
	}
	b := make([]byte, csrfBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	token := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{
		Name:     csrfCookie,
		Value:    token,
		Path:     "/",
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
	return token
}

// validToken reports whether s has the shape of a token csrfToken makes.
func validToken(s string) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && len(b) == csrfBytes
}
