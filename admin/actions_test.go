package admin_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
)

func TestReplaySelectedWithConfirmation(t *testing.T) {
	t.Parallel()
	b := setup(t, testConfig(), someEvents()...)
	br := newBrowser(t, b.h)
	page := br.get("/dead?topic=orders", http.StatusOK)
	tok := token(t, page)
	before := b.store.snapshot()

	// The first POST only asks.
	form := url.Values{"topic": {"orders"}, "scope": {"selected"}, "id": {"01A", "01B"}}
	w := br.post("/dead/replay", form, tok)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	confirm := w.Body.String()
	require.Contains(t, confirm, "You are about to <strong>replay 2 events</strong> matching 2 selected event ids, topic &#34;orders&#34;.")
	require.Equal(t, before, b.store.snapshot(), "the first POST changed the store")
	require.Empty(t, b.store.replays)
	require.Contains(t, confirm, `name="confirm" value="1"`)
	require.Contains(t, hrefTo(t, confirm, "Cancel"), "dead?topic=orders")

	// The confirmation POSTs the same fields with confirm=1: now it acts.
	form.Set("confirm", "1")
	w = br.post("/dead/replay", form, token(t, confirm))
	require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
	require.Equal(t, "../dead?did=replay&n=2&topic=orders", w.Header().Get("Location"))
	require.Equal(t, []outbox.DeadFilter{{IDs: []string{"01A", "01B"}, Topic: "orders"}}, b.store.replays)
	after := b.store.snapshot()
	require.Equal(t, outbox.StatusNew, after["01A"].Status)
	require.Equal(t, 0, after["01A"].Attempts)
	require.Equal(t, outbox.StatusDead, after["01C"].Status)

	// The redirect shows the outcome.
	body := br.get("/"+resolve(t, "/dead/replay", w.Header().Get("Location"))[1:], http.StatusOK)
	require.Contains(t, body, "Replayed 2 events")
	require.Contains(t, body, "0 matching")

	// And the action log says who did what.
	logs := b.logs.String()
	require.Contains(t, logs, `msg="wmoutbox admin: replay of dead events"`)
	require.Contains(t, logs, "user=ops")
	require.Contains(t, logs, "count=2")
	require.Contains(t, logs, `ids="[01A 01B]"`)
}

func TestPurgeGroupWithConfirmation(t *testing.T) {
	t.Parallel()
	b := setup(t, testConfig(), someEvents()...)
	br := newBrowser(t, b.h)
	tok := token(t, br.get("/dead", http.StatusOK))
	before := b.store.snapshot()

	form := url.Values{"group": {"g-timeout"}, "scope": {"all"}, "id": {"01C"}}
	w := br.post("/dead/purge", form, tok)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Contains(t, w.Body.String(), "purge 2 events</strong> matching failure group &#34;g-timeout&#34;")
	require.Contains(t, w.Body.String(), "cannot be undone")
	require.NotContains(t, w.Body.String(), `value="01C"`, "ids ride along with a whole-filter action")
	require.Equal(t, before, b.store.snapshot())

	form.Set("confirm", "1")
	w = br.post("/dead/purge", form, tok)
	require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
	require.Equal(t, []outbox.DeadFilter{{Group: "g-timeout"}}, b.store.purges)
	after := b.store.snapshot()
	require.NotContains(t, after, "01A")
	require.NotContains(t, after, "01B")
	require.Contains(t, after, "01C")

	body := br.get("/"+resolve(t, "/dead/purge", w.Header().Get("Location"))[1:], http.StatusOK)
	require.Contains(t, body, "Purged 2 events.")
	require.Contains(t, b.logs.String(), `filter="failure group \"g-timeout\""`)
}

func TestReplayFromTheEventPage(t *testing.T) {
	t.Parallel()
	b := setup(t, testConfig(), someEvents()...)
	br := newBrowser(t, b.h)
	page := br.get("/events/01C", http.StatusOK)
	form := url.Values{"id": {"01C"}, "scope": {"selected"}, "return": {"event"}}

	w := br.post("/dead/replay", form, token(t, page))
	require.Equal(t, http.StatusOK, w.Code)
	require.Contains(t, w.Body.String(), "replay 1 event</strong>")
	require.Equal(t, "../events/01C", hrefTo(t, w.Body.String(), "Cancel"))

	form.Set("confirm", "1")
	w = br.post("/dead/replay", form, token(t, page))
	require.Equal(t, http.StatusSeeOther, w.Code)
	require.Equal(t, "../events/01C?did=replay&n=1", w.Header().Get("Location"))
	body := br.get("/events/01C?did=replay&n=1", http.StatusOK)
	require.Contains(t, body, "Replayed 1 event:")
	require.Contains(t, body, `<span class="status sNEW">NEW</span>`)
}

func TestActionRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, testConfig(), someEvents()...)
	br := newBrowser(t, b.h)
	tok := token(t, br.get("/dead", http.StatusOK))
	before := b.store.snapshot()

	for name, tc := range map[string]struct {
		path string
		form url.Values
		code int
		want string
	}{
		"a filter that restricts nothing": {"/dead/replay", url.Values{"scope": {"all"}, "confirm": {"1"}}, http.StatusBadRequest, "selects every DEAD event"},
		"nothing selected":                {"/dead/purge", url.Values{"scope": {"selected"}, "topic": {"orders"}, "confirm": {"1"}}, http.StatusBadRequest, "No event selected"},
		"an unknown action":               {"/dead/explode", url.Values{"id": {"01A"}, "confirm": {"1"}}, http.StatusNotFound, "No such page"},
		"a bad time":                      {"/dead/purge", url.Values{"died_before": {"soon"}, "confirm": {"1"}}, http.StatusBadRequest, "not a time"},
	} {
		w := br.post(tc.path, tc.form, tok)
		require.Equal(t, tc.code, w.Code, name)
		require.Contains(t, w.Body.String(), tc.want, name)
	}
	require.Equal(t, before, b.store.snapshot())
	require.Empty(t, b.store.replays)
	require.Empty(t, b.store.purges)
}

func TestActionStoreError(t *testing.T) {
	t.Parallel()
	b := setup(t, testConfig(), someEvents()...)
	br := newBrowser(t, b.h)
	tok := token(t, br.get("/dead", http.StatusOK))
	b.store.err = errStoreDown
	w := br.post("/dead/replay", url.Values{"id": {"01A"}, "scope": {"selected"}, "confirm": {"1"}}, tok)
	require.Equal(t, http.StatusInternalServerError, w.Code)
	require.Contains(t, w.Body.String(), "connection refused")
	require.Contains(t, b.logs.String(), "replay of dead events failed")
}
