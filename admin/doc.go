// Package admin is the operator's dead-letter dashboard: an [http.Handler]
// that a service mounts to see its outbox and to replay or purge DEAD
// events.
//
// It is server-rendered HTML (html/template) with its stylesheet and a few
// lines of script embedded in the binary: no build step, nothing loaded
// from elsewhere. It uses the outbox's public operator API only, through
// the [Store] interface, which every dialect's store satisfies.
//
// # Mounting
//
// [New] returns the handler. Every link it renders is relative, so it
// works under any path without configuration; strip the mount path
// before it:
//
//	h, err := admin.New(store, admin.Config{Authorize: admin.BearerToken(token)})
//	if err != nil { ... }
//	mux.Handle("/outbox/", http.StripPrefix("/outbox", h))
//
// # Pages
//
//   - GET / — the overview: events by topic and status, how long each
//     topic's oldest due event has waited, the claims in flight by owner,
//     the largest failure groups.
//   - GET /dead — the dead letters: the failure groups ([outbox.DeadGroup])
//     and the DEAD events, filtered by topic, event type, aggregate,
//     error text, failure group (?group=) and time of death, a page at a
//     time (?after= the last id; ?limit= up to [MaxPageSize]), with their
//     total: the sum of the groups' counts when the page lists every
//     group, which spares the store a second pass over the DEAD events;
//     CountDead's otherwise.
//   - POST /dead/replay, POST /dead/purge — replay or purge the selected
//     events, a failure group, or every event matching the filter; see
//     Actions.
//   - GET /events/{id} — one event: every column, its headers, and its
//     payload, indented when JSON and as a hex dump otherwise, cut at
//     Config.PayloadLimit bytes.
//   - GET /pending — the NEW and RETRY events, by topic and status, a page
//     at a time.
//   - GET /aggregates — one aggregate's events (?aggtype= and ?aggid=;
//     ?topic= narrows them), every status, newest first, a page at a time
//     (?before= where the previous page ended), from
//     [outbox.Store.AggregateEvents]. The event page and the rows of the
//     other lists link an event's aggregate to it.
//
// No page reads a table whole: lists are pages of Config.PageSize rows,
// asked of the store as one row more to know whether another follows.
//
// # Actions
//
// A replay or purge takes two POSTs: the first counts the events it
// selects and shows "you are about to replay N events matching …" with a
// confirmation button, which POSTs the same fields with confirm=1; only
// that one acts. It then redirects (303) to a page that reports the
// outcome, so reloading repeats nothing. The store refuses a filter that
// selects every DEAD event, and so does the page. Every action is logged
// at Info on Config.Logger with the user Config.Authorize named, the
// remote address, the filter or the ids, and the count.
//
// # Security
//
//   - Config.Authorize is required; [BearerToken] and [BasicAuth] (with
//     [BasicChallenge]) compare credentials in constant time. A request it
//     refuses gets 401, and nothing else happens. Without an authorizer,
//     [New] fails with [ErrNoAuthorizer] unless Config.ReadOnly is set,
//     and then every request not from a loopback address gets 403.
//   - ReadOnly hides the buttons and refuses every POST with 403.
//   - POSTs are protected against cross-site request forgery twice: a
//     random token in a SameSite=Strict, HttpOnly cookie must come back in
//     the form (a double-submit cookie, kept by the browser, so the page
//     needs no server state and works across replicas), and
//     [http.CrossOriginProtection] refuses requests the browser marks as
//     cross-origin (Sec-Fetch-Site, or an Origin that is not the host;
//     Config.TrustedOrigins adds origins). A refused POST gets 403.
//   - Config.HidePayloads shows payloads' and header values' sizes only.
//   - Every response carries a Content-Security-Policy without inline
//     script or style and with frame-ancestors 'none', X-Content-Type-Options
//     nosniff, Referrer-Policy no-referrer and Cache-Control no-store.
//     Event content is escaped by html/template wherever it appears.
//
// # Errors
//
// A store error renders an error page with status 500, showing the error
// to the operator, and is logged at Error; an unknown event id renders a
// 404 page; a malformed filter a 400 page.
//
// A Handler is safe for concurrent use.
package admin
