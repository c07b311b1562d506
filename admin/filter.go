package admin

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// Query and form parameters of the pages and their actions.
const (
	pTopic      = "topic"
	pType       = "type"
	pAggType    = "aggtype"
	pAggID      = "aggid"
	pError      = "error"
	pGroup      = "group"
	pDiedAfter  = "died_after"
	pDiedBefore = "died_before"
	pID         = "id"
	pAfter      = "after"
	pBefore     = "before"
	pLimit      = "limit"
	pStatus     = "status"
)

// deadParams is the dead-letter filter of a request: the store's filter
// and the values as given, to fill the form and build links.
type deadParams struct {
	Filter outbox.DeadFilter
	// Values are the filter's parameters as given (without ids), in a
	// stable order: what links and hidden fields carry.
	Values url.Values
}

// filterParams are the filter's parameters in the order the form shows
// them.
var filterParams = []string{pTopic, pType, pAggType, pAggID, pError, pGroup, pDiedAfter, pDiedBefore}

// parseDeadParams reads the dead-letter filter of v (a query or a form);
// ids only when withIDs is set (the actions: a link never selects ids).
func parseDeadParams(v url.Values, withIDs bool) (deadParams, error) {
	p := deadParams{Values: url.Values{}}
	for _, k := range filterParams {
		if s := strings.TrimSpace(v.Get(k)); s != "" {
			p.Values.Set(k, s)
		}
	}
	f := &p.Filter
	f.Topic = p.Values.Get(pTopic)
	f.EventType = outbox.EventType(p.Values.Get(pType))
	f.AggregateType = outbox.AggregateType(p.Values.Get(pAggType))
	f.AggregateID = p.Values.Get(pAggID)
	f.ErrorContains = p.Values.Get(pError)
	f.Group = p.Values.Get(pGroup)
	var err error
	if f.DiedAfter, err = parseTime(p.Values.Get(pDiedAfter)); err != nil {
		return p, fmt.Errorf("died after: %w", err)
	}
	if f.DiedBefore, err = parseTime(p.Values.Get(pDiedBefore)); err != nil {
		return p, fmt.Errorf("died before: %w", err)
	}
	if withIDs {
		if ids := v[pID]; len(ids) > 0 {
			if len(ids) > MaxPageSize {
				return p, fmt.Errorf("%d events selected, at most %d at once", len(ids), MaxPageSize)
			}
			f.IDs = slices.Clone(ids)
		}
	}
	return p, nil
}

// timeLayouts are the forms a time parameter may take: RFC 3339, and what
// a datetime-local or date input sends, read as UTC.
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range timeLayouts {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time (2006-01-02T15:04:05Z, or a date)", s)
}

// restricts reports whether f selects less than every DEAD event, as the
// store requires of a replay or purge.
func restricts(f *outbox.DeadFilter) bool {
	return f.IDs != nil || f.EventType != "" || f.Topic != "" || f.AggregateType != "" || f.AggregateID != "" ||
		f.ErrorContains != "" || f.Group != "" || !f.DiedAfter.IsZero() || !f.DiedBefore.IsZero()
}

// describe says in words what the filter of p selects, for the
// confirmation page and the action log.
func (p *deadParams) describe() string {
	labels := map[string]string{
		pTopic: "topic", pType: "event type", pAggType: "aggregate type", pAggID: "aggregate id",
		pError: "error contains", pGroup: "failure group", pDiedAfter: "died at or after", pDiedBefore: "died before",
	}
	var parts []string
	if ids := p.Filter.IDs; ids != nil {
		parts = append(parts, fmt.Sprintf("%d selected event ids", len(ids)))
	}
	for _, k := range filterParams {
		if s := p.Values.Get(k); s != "" {
			parts = append(parts, labels[k]+" "+strconv.Quote(s))
		}
	}
	if len(parts) == 0 {
		return "every DEAD event"
	}
	return strings.Join(parts, ", ")
}

// pageLimit reads the limit parameter: the page size, at most MaxPageSize.
func pageLimit(v url.Values, def int) (int, error) {
	s := v.Get(pLimit)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxPageSize {
		return 0, fmt.Errorf("limit %q: want a number from 1 to %d", s, MaxPageSize)
	}
	return n, nil
}

// with returns a copy of v with the pairs kv set (removed when "").
func with(v url.Values, kv ...string) url.Values {
	c := url.Values{}
	for k, vs := range v {
		c[k] = slices.Clone(vs)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			c.Del(kv[i])
		} else {
			c.Set(kv[i], kv[i+1])
		}
	}
	return c
}
