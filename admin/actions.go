package admin

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// Form fields of the actions, besides the filter's.
const (
	fScope   = "scope"   // "selected": the ids checked; "all": the filter
	fConfirm = "confirm" // "1" on the confirmation page's POST
	fReturn  = "return"  // "event": back to the event's page
)

type confirmData struct {
	Action, Verb string
	Count        int64
	Description  string
	// Hidden are the fields the confirming POST repeats.
	Hidden url.Values
	Cancel string
}

// action serves POST /dead/replay and POST /dead/purge. The first POST
// changes nothing: it counts the events the request selects and asks for
// a confirmation, which POSTs the same fields with confirm=1; only then
// does the store act, and the answer redirects (303) to a page that shows
// the outcome.
func (h *Handler) action(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("action")
	var act func(context.Context, outbox.DeadFilter) (int64, error)
	var verb string
	switch name {
	case "replay":
		act, verb = h.store.ReplayDead, "replay"
	case "purge":
		act, verb = h.store.PurgeDead, "purge"
	default:
		h.notFound(w, r)
		return
	}
	form := r.PostForm
	scope := form.Get(fScope)
	params, err := parseDeadParams(form, scope != "all")
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "Bad filter: "+err.Error())
		return
	}
	if scope == "selected" && len(params.Filter.IDs) == 0 {
		h.fail(w, r, http.StatusBadRequest, "No event selected: tick the events to "+verb+" first.")
		return
	}
	if !restricts(&params.Filter) {
		h.fail(w, r, http.StatusBadRequest, "The filter selects every DEAD event. Narrow it first: "+
			"to "+verb+" them all, set “died before” to now.")
		return
	}
	back := url.Values{}
	if id := form.Get(pID); form.Get(fReturn) == "event" && len(params.Filter.IDs) == 1 {
		back.Set(fReturn, "event")
		back.Set(pID, id)
	}
	ctx := r.Context()

	if form.Get(fConfirm) != "1" {
		n, err := h.store.CountDead(ctx, params.Filter)
		if err != nil {
			h.storeFailed(w, r, "count the dead events", err)
			return
		}
		p := h.newPage(w, r, "dead", "Confirm "+verb)
		hidden := with(params.Values, fScope, scope, fConfirm, "1")
		if params.Filter.IDs != nil {
			hidden[pID] = params.Filter.IDs
		}
		for k, v := range back {
			hidden[k] = v
		}
		cancel := link(p.Base, "dead", params.Values)
		if back.Get(fReturn) == "event" {
			cancel = eventLink(p.Base, back.Get(pID))
		}
		p.Data = &confirmData{
			Action: name, Verb: verb, Count: n, Description: params.describe(), Hidden: hidden, Cancel: cancel,
		}
		h.render(w, r, http.StatusOK, "confirm", p)
		return
	}

	n, err := act(ctx, params.Filter)
	attrs := []any{"user", userOf(r), "remote", r.RemoteAddr, "filter", params.describe(), "count", n}
	if params.Filter.IDs != nil {
		attrs = append(attrs, "ids", params.Filter.IDs)
	}
	if err != nil {
		h.log.ErrorContext(ctx, "wmoutbox admin: "+verb+" of dead events failed", append(attrs, "error", err)...)
		code := http.StatusInternalServerError
		if errors.Is(err, outbox.ErrInvalidRequest) {
			code = http.StatusBadRequest
		}
		h.fail(w, r, code, "The "+verb+" failed after "+strconv.FormatInt(n, 10)+" events: "+err.Error())
		return
	}
	h.log.InfoContext(ctx, "wmoutbox admin: "+verb+" of dead events", attrs...)

	result := url.Values{"did": {name}, "n": {strconv.FormatInt(n, 10)}}
	b := base(r)
	if back.Get(fReturn) == "event" && name == "replay" {
		redirect(w, eventLink(b, back.Get(pID))+"?"+result.Encode(), http.StatusSeeOther)
		return
	}
	v := params.Values
	for k, vs := range result {
		v = with(v, k, vs[0])
	}
	redirect(w, link(b, "dead", v), http.StatusSeeOther)
}
