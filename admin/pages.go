package admin

import (
	"cmp"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/bytesize"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// overviewGroups is how many failure groups the overview lists.
const overviewGroups = 10

type overviewData struct {
	At     time.Time
	Topics []topicRow
	Total  topicRow
	Claims []outbox.ClaimStats
	Relays []outbox.RelayStats
	Slots  []slotRow
	Groups []groupRow
}

// slotRow is a log slot as the overview lists it.
type slotRow struct {
	Name, WALStatus, Reader string
	Active                  bool
	LagBytes                int64
	// Lag is LagBytes in binary units; ConfirmedAge is "" when no relay
	// of the table confirmed a position.
	Lag, ConfirmedAge string
	ConfirmedAt       time.Time
}

type topicRow struct {
	Topic                           string
	Link                            string
	New, Retry, Done, Dead, Pending int64
	// OldestAge is how long the topic's oldest due event has waited; ""
	// when none is due.
	OldestAge string
}

// groupRow is a failure group as a table lists it. Rows are flat structs
// of the values shown: a template reaching a field through embedded
// structs pays a reflective search for every cell.
type groupRow struct {
	Group, Reason, SampleError string
	Count                      int64
	FirstDied, LastDied        string
	Topics                     string
	Link                       string
	Selected                   bool
	// Values are the filter the group's buttons act on.
	Values url.Values
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	// Both read the whole table, or all of its DEAD rows: at once, the
	// page waits for the longer of the two rather than for their sum.
	var (
		stats    outbox.Stats
		statsErr error
		wg       sync.WaitGroup
	)
	wg.Go(func() { stats, statsErr = h.store.Stats(ctx) })
	groups, err := h.store.DeadGroups(ctx, outbox.DeadGroupQuery{Limit: overviewGroups})
	wg.Wait()
	if statsErr != nil {
		h.storeFailed(w, r, "read the stats", statsErr)
		return
	}
	if err != nil {
		h.storeFailed(w, r, "group the dead events", err)
		return
	}
	p := h.newPage(w, r, "overview", "Overview")
	d := &overviewData{At: stats.At, Claims: stats.Claims, Relays: stats.Relays, Total: topicRow{Topic: "all topics"}}
	for _, t := range stats.Topics {
		row := topicRow{
			Topic: t.Topic, New: t.New, Retry: t.Retry, Done: t.Done, Dead: t.Dead, Pending: t.Pending(),
			Link: link(p.Base, "pending", url.Values{pTopic: {t.Topic}}),
		}
		if !t.OldestDue.IsZero() {
			row.OldestAge = fmtAge(stats.At.Sub(t.OldestDue))
		}
		d.Topics = append(d.Topics, row)
		d.Total.New += t.New
		d.Total.Retry += t.Retry
		d.Total.Done += t.Done
		d.Total.Dead += t.Dead
		d.Total.Pending += t.Pending()
	}
	for _, s := range stats.Slots {
		row := slotRow{Name: s.Name, WALStatus: s.WALStatus, Reader: s.Reader, Active: s.Active,
			LagBytes: s.LagBytes, Lag: bytesize.Format(s.LagBytes), ConfirmedAt: s.ConfirmedAt}
		if !s.ConfirmedAt.IsZero() {
			row.ConfirmedAge = fmtAge(s.ConfirmedAge)
		}
		d.Slots = append(d.Slots, row)
	}
	for i := range groups {
		d.Groups = append(d.Groups, newGroupRow(&groups[i], link(p.Base, "dead", url.Values{pGroup: {groups[i].Group}})))
	}
	p.Data = d
	h.render(w, r, http.StatusOK, "overview", p)
}

type deadData struct {
	Filter      deadParams
	Description string
	Groups      []groupRow
	// GroupsCut is set when there are more groups than the page lists.
	GroupsCut bool
	Events    []eventRow
	Total     int64
	// Hidden are the filter's fields as hidden form fields.
	Hidden    url.Values
	Next      string
	First     string
	ClearLink string
	Limit     int
}

// eventRow is an event as a list shows it; flat, as groupRow.
type eventRow struct {
	ID, Status, Topic, Type, Aggregate string
	Attempts                           int
	Updated, Due, Created, LastError   string
	Link, GroupLink, AggregateLink     string
}

// newGroupRow returns the row of g, linked to link.
func newGroupRow(g *outbox.DeadGroup, link string) groupRow {
	return groupRow{
		Group: g.Group, Reason: shorten(200, g.Reason), SampleError: shorten(300, g.SampleError), Count: g.Count,
		FirstDied: fmtTime(g.FirstDied), LastDied: fmtTime(g.LastDied), Topics: strings.Join(g.Topics, ", "),
		Link: link,
	}
}

func (h *Handler) dead(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	params, err := parseDeadParams(q, false)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "Bad filter: "+err.Error())
		return
	}
	limit, err := pageLimit(q, h.cfg.PageSize)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "Bad page size: "+err.Error())
		return
	}
	after := q.Get(pAfter)

	// The groups of the events the other fields select, so that choosing
	// a group keeps the others in view.
	gq := outbox.DeadGroupQuery{DeadFilter: params.Filter, Limit: h.cfg.PageSize + 1}
	gq.Group = ""
	groups, err := h.store.DeadGroups(ctx, gq)
	if err != nil {
		h.storeFailed(w, r, "group the dead events", err)
		return
	}
	events, err := h.store.QueryDead(ctx, outbox.DeadQuery{DeadFilter: params.Filter, After: after, Limit: limit + 1})
	if err != nil {
		h.storeFailed(w, r, "list the dead events", err)
		return
	}
	// The groups are of every event the filter selects but for its
	// group: when they are all listed, their counts add up to the total,
	// and counting the events again (a second pass over the DEAD rows)
	// would only slow the page down.
	total, counted := int64(0), len(groups) <= h.cfg.PageSize
	for i := range groups {
		if params.Filter.Group == "" || groups[i].Group == params.Filter.Group {
			total += groups[i].Count
		}
	}
	if !counted {
		total, err = h.store.CountDead(ctx, params.Filter)
		if err != nil {
			h.storeFailed(w, r, "count the dead events", err)
			return
		}
	}

	p := h.newPage(w, r, "dead", "Dead letters")
	p.Message = resultMessage(q)
	d := &deadData{Filter: params, Description: params.describe(), Total: total, Hidden: params.Values, Limit: limit}
	if len(groups) > h.cfg.PageSize {
		groups, d.GroupsCut = groups[:h.cfg.PageSize], true
	}
	for i := range groups {
		v := with(params.Values, pGroup, groups[i].Group)
		row := newGroupRow(&groups[i], link(p.Base, "dead", v))
		row.Selected, row.Values = groups[i].Group == params.Filter.Group, v
		d.Groups = append(d.Groups, row)
	}
	paging := params.Values
	if limit != h.cfg.PageSize {
		paging = with(paging, pLimit, q.Get(pLimit))
	}
	if len(events) > limit {
		events = events[:limit]
		d.Next = link(p.Base, "dead", with(paging, pAfter, events[len(events)-1].ID))
	}
	if after != "" {
		d.First = link(p.Base, "dead", paging)
	}
	d.ClearLink = link(p.Base, "dead", nil)
	d.Events = h.eventRows(p.Base, events)
	p.Data = d
	h.render(w, r, http.StatusOK, "dead", p)
}

func (h *Handler) eventRows(base string, events []outbox.Event) []eventRow {
	rows := make([]eventRow, len(events))
	for i := range events {
		e := &events[i]
		rows[i] = eventRow{
			ID: e.ID, Status: e.Status.String(), Topic: e.Topic, Type: string(e.Type), Aggregate: string(e.AggregateType),
			Attempts: e.Attempts, Updated: fmtTime(e.UpdatedAt), Due: fmtTime(e.AvailableAt), Created: fmtTime(e.CreatedAt),
			LastError: shorten(160, e.LastError), Link: eventLink(base, e.ID),
		}
		if e.AggregateID != "" {
			rows[i].Aggregate += " / " + e.AggregateID
			rows[i].AggregateLink = aggregateLink(base, e.AggregateType, e.AggregateID)
		}
		if g := e.ErrorGroup; g != "" {
			rows[i].GroupLink = link(base, "dead", url.Values{pGroup: {g}})
		}
	}
	return rows
}

// resultMessage returns the message of an action's outcome that a
// redirect carries in q: a fixed sentence around a number, so a link
// cannot put words of its own on the page.
func resultMessage(q url.Values) string {
	n := q.Get("n")
	if n == "" || strings.Trim(n, "0123456789") != "" || len(n) > 19 {
		return ""
	}
	events := "events"
	if n == "1" {
		events = "event"
	}
	switch q.Get("did") {
	case "replay":
		return "Replayed " + n + " " + events + ": they are NEW, due at once, and relays claim them at their next poll."
	case "purge":
		return "Purged " + n + " " + events + "."
	}
	return ""
}

type eventData struct {
	Event         outbox.Event
	Headers       []header
	Payload       payloadView
	GroupLink     string
	AggregateLink string
	Dead          bool
	Hidden        url.Values
	LeaseLeft     string
	Malformed     string
	HeaderSize    int
}

type header struct {
	Name, Value string
	Size        int
}

func (h *Handler) event(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ev, err := h.store.Get(r.Context(), id)
	if errors.Is(err, outbox.ErrNotFound) {
		h.fail(w, r, http.StatusNotFound, "No event has the id "+id+": it may have been purged.")
		return
	}
	if err != nil {
		h.storeFailed(w, r, "read the event", err)
		return
	}
	p := h.newPage(w, r, "", "Event "+ev.ID)
	p.Message = resultMessage(r.URL.Query())
	d := &eventData{
		Event:   ev,
		Payload: viewPayload(ev.PayloadJSON, ev.PayloadBytes, h.cfg.PayloadLimit, h.cfg.HidePayloads),
		Dead:    ev.Status == outbox.StatusDead,
		Hidden:  url.Values{pID: {ev.ID}},
	}
	if ev.ErrorGroup != "" {
		d.GroupLink = link(p.Base, "dead", url.Values{pGroup: {ev.ErrorGroup}})
	}
	if ev.AggregateID != "" {
		d.AggregateLink = aggregateLink(p.Base, ev.AggregateType, ev.AggregateID)
	}
	if ev.Malformed != nil {
		d.Malformed = ev.Malformed.Error()
	}
	names := make([]string, 0, len(ev.Headers))
	for k := range ev.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		hd := header{Name: k, Size: len(ev.Headers[k])}
		if !h.cfg.HidePayloads {
			hd.Value = ev.Headers[k]
		}
		d.Headers = append(d.Headers, hd)
	}
	p.Data = d
	h.render(w, r, http.StatusOK, "event", p)
}

type pendingData struct {
	Topic, Status string
	Events        []eventRow
	Next, First   string
	Limit         int
}

func (h *Handler) pending(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := pageLimit(q, h.cfg.PageSize)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "Bad page size: "+err.Error())
		return
	}
	pq := outbox.PendingQuery{Topic: strings.TrimSpace(q.Get(pTopic)), After: q.Get(pAfter), Limit: limit + 1}
	status := q.Get(pStatus)
	switch status {
	case "":
	case "NEW":
		pq.Statuses = []outbox.Status{outbox.StatusNew}
	case "RETRY":
		pq.Statuses = []outbox.Status{outbox.StatusRetry}
	default:
		h.fail(w, r, http.StatusBadRequest, "Bad status: want NEW or RETRY.")
		return
	}
	events, err := h.store.QueryPending(r.Context(), pq)
	if err != nil {
		h.storeFailed(w, r, "list the pending events", err)
		return
	}
	p := h.newPage(w, r, "pending", "Pending")
	d := &pendingData{Topic: pq.Topic, Status: status, Limit: limit}
	paging := with(url.Values{}, pTopic, pq.Topic, pStatus, status)
	if limit != h.cfg.PageSize {
		paging = with(paging, pLimit, q.Get(pLimit))
	}
	if len(events) > limit {
		events = events[:limit]
		d.Next = link(p.Base, "pending", with(paging, pAfter, events[len(events)-1].ID))
	}
	if pq.After != "" {
		d.First = link(p.Base, "pending", paging)
	}
	d.Events = h.eventRows(p.Base, events)
	p.Data = d
	h.render(w, r, http.StatusOK, "pending", p)
}

type aggregateData struct {
	Type, ID, Topic string
	Events          []eventRow
	Next, First     string
	Limit           int
}

// aggregate lists one aggregate's events, newest first: the form alone
// until an aggregate id is given.
func (h *Handler) aggregate(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := pageLimit(q, h.cfg.PageSize)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "Bad page size: "+err.Error())
		return
	}
	before, err := outbox.ParseAggregateCursor(q.Get(pBefore))
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "Bad page: "+err.Error())
		return
	}
	// The aggregate as given, spaces and all: the links of events carry
	// it whole.
	d := &aggregateData{Type: q.Get(pAggType), ID: q.Get(pAggID), Topic: strings.TrimSpace(q.Get(pTopic)), Limit: limit}
	var page outbox.AggregatePage
	if d.ID != "" {
		page, err = h.store.AggregateEvents(r.Context(), outbox.AggregateQuery{
			Type: outbox.AggregateType(d.Type), ID: d.ID, Topic: d.Topic, Before: before, Limit: limit,
		})
		if err != nil {
			h.storeFailed(w, r, "list the aggregate's events", err)
			return
		}
	}
	title := "Aggregate"
	if d.ID != "" {
		title += " " + cmp.Or(d.Type, string(outbox.GlobalAggregate)) + " / " + d.ID
	}
	p := h.newPage(w, r, "aggregates", title)
	paging := with(url.Values{}, pAggType, d.Type, pAggID, d.ID, pTopic, d.Topic)
	if limit != h.cfg.PageSize {
		paging = with(paging, pLimit, q.Get(pLimit))
	}
	if !page.Next.IsZero() {
		d.Next = link(p.Base, "aggregates", with(paging, pBefore, page.Next.String()))
	}
	if !before.IsZero() {
		d.First = link(p.Base, "aggregates", paging)
	}
	d.Events = h.eventRows(p.Base, page.Events)
	p.Data = d
	h.render(w, r, http.StatusOK, "aggregate", p)
}
