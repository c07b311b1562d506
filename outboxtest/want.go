package outboxtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// Want describes the events a test expects. An event matches when it
// matches every field that is set; zero fields match every event, and a
// zero Want every event.
type Want struct {
	// ID is the event id.
	ID string
	// Type is the event type.
	Type outbox.EventType
	// Topic is the topic the event is routed to (Envelope.Topic, which
	// defaults to the type).
	Topic string
	// AggregateType and AggregateID are the event's aggregate.
	AggregateType outbox.AggregateType
	AggregateID   string
	// TenantID is the event's tenant.
	TenantID string
	// Headers are headers the event has, with these values; it may have
	// others.
	Headers map[string]string
	// JSON is the whole payload, compared as JSON documents: key order,
	// white space and the spelling of numbers (1 or 1.0) do not matter.
	// Give it as JSON text (a string, []byte or json.RawMessage) or as any
	// other value, which is marshalled with encoding/json (a struct, a
	// map[string]any).
	JSON any
	// JSONContains is part of the payload, compared as JSON as JSON is:
	// each member of an object in it must be in the payload's object at
	// the same place, with a value that contains it in turn; other members
	// of the payload do not matter. Arrays match element by element and
	// must be of the same length; other values must be equal.
	JSONContains any
	// Payload is the payload, byte for byte, whether it was written as
	// JSON or as bytes.
	Payload []byte
}

// Matches reports whether e matches w. It panics when w.JSON or
// w.JSONContains is not valid JSON; the Require functions fail the test
// instead.
func (w Want) Matches(e outbox.Event) bool {
	c, err := w.compile()
	if err != nil {
		panic(err)
	}
	return c.mismatch(&e) == ""
}

// String describes w by its fields that are set.
func (w Want) String() string {
	var parts []string
	add := func(name, value string) {
		if value != "" {
			parts = append(parts, name+": "+strconv.Quote(value))
		}
	}
	add("ID", w.ID)
	add("Type", string(w.Type))
	add("Topic", w.Topic)
	add("AggregateType", string(w.AggregateType))
	add("AggregateID", w.AggregateID)
	add("TenantID", w.TenantID)
	if len(w.Headers) > 0 {
		parts = append(parts, fmt.Sprintf("Headers: %v", w.Headers))
	}
	if w.JSON != nil {
		parts = append(parts, "JSON: "+describeJSON(w.JSON))
	}
	if w.JSONContains != nil {
		parts = append(parts, "JSONContains: "+describeJSON(w.JSONContains))
	}
	if w.Payload != nil {
		parts = append(parts, "Payload: "+excerpt(w.Payload))
	}
	if len(parts) == 0 {
		return "{any event}"
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// compiled is a Want with its JSON decoded once.
type compiled struct {
	Want
	json, contains       any
	hasJSON, hasContains bool
}

func (w Want) compile() (*compiled, error) {
	c := &compiled{Want: w}
	var err error
	if w.JSON != nil {
		c.hasJSON = true
		if c.json, err = decodeWant(w.JSON); err != nil {
			return nil, fmt.Errorf("outboxtest: Want.JSON: %w", err)
		}
	}
	if w.JSONContains != nil {
		c.hasContains = true
		if c.contains, err = decodeWant(w.JSONContains); err != nil {
			return nil, fmt.Errorf("outboxtest: Want.JSONContains: %w", err)
		}
	}
	return c, nil
}

// mismatch returns why e does not match, "" when it does: the first field
// that differs.
func (c *compiled) mismatch(e *outbox.Event) string {
	fields := []struct{ name, got, want string }{
		{"id", e.ID, c.ID},
		{"type", string(e.Type), string(c.Type)},
		{"topic", e.Topic, c.Topic},
		{"aggregate type", string(e.AggregateType), string(c.AggregateType)},
		{"aggregate id", e.AggregateID, c.AggregateID},
		{"tenant id", e.TenantID, c.TenantID},
	}
	for _, f := range fields {
		if f.want != "" && f.got != f.want {
			return fmt.Sprintf("%s is %q, not %q", f.name, f.got, f.want)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Headers)) {
		if got, ok := e.Headers[k]; !ok || got != c.Headers[k] {
			if !ok {
				return fmt.Sprintf("header %q is missing", k)
			}
			return fmt.Sprintf("header %q is %q, not %q", k, got, c.Headers[k])
		}
	}
	payload := e.Payload()
	if c.Payload != nil && !bytes.Equal(payload, c.Payload) {
		return "payload differs"
	}
	if !c.hasJSON && !c.hasContains {
		return ""
	}
	var got any
	if err := json.Unmarshal(payload, &got); err != nil {
		return "payload is not JSON"
	}
	if c.hasJSON && !reflect.DeepEqual(got, c.json) {
		return "JSON payload differs"
	}
	if c.hasContains {
		if path, ok := contains(got, c.contains, "$"); !ok {
			return "JSON payload differs at " + path
		}
	}
	return ""
}

// decodeWant decodes JSON text, or marshals any other value and decodes
// that, into what encoding/json decodes into an any.
func decodeWant(v any) (any, error) {
	var text []byte
	switch v := v.(type) {
	case string:
		text = []byte(v)
	case []byte:
		text = v
	case json.RawMessage:
		text = v
	default:
		var err error
		if text, err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	var decoded any
	if err := json.Unmarshal(text, &decoded); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	return decoded, nil
}

// contains reports whether got contains want (see Want.JSONContains), and
// otherwise the path of the first value that differs.
func contains(got, want any, path string) (string, bool) {
	switch want := want.(type) {
	case map[string]any:
		obj, ok := got.(map[string]any)
		if !ok {
			return path, false
		}
		for _, k := range slices.Sorted(maps.Keys(want)) {
			v, ok := obj[k]
			if !ok {
				return path + "." + k + " (missing)", false
			}
			if p, ok := contains(v, want[k], path+"."+k); !ok {
				return p, false
			}
		}
		return "", true
	case []any:
		arr, ok := got.([]any)
		if !ok || len(arr) != len(want) {
			return path, false
		}
		for i := range want {
			if p, ok := contains(arr[i], want[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return "", true
	default:
		if !reflect.DeepEqual(got, want) {
			return path, false
		}
		return "", true
	}
}

// maxExcerpt is how much of a payload a failure message shows.
const maxExcerpt = 120

// excerpt shows a payload in a failure message: JSON compacted, text
// quoted, binary by its size; cut to about maxExcerpt bytes.
func excerpt(payload []byte) string {
	var compact bytes.Buffer
	if json.Compact(&compact, payload) == nil {
		return cut(compact.String())
	}
	if !utf8.Valid(payload) {
		return fmt.Sprintf("(%d bytes, not text)", len(payload))
	}
	return strconv.Quote(cut(string(payload)))
}

func cut(s string) string {
	if len(s) <= maxExcerpt {
		return s
	}
	end := maxExcerpt
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + "…"
}

// describeJSON shows a Want's JSON field in a message.
func describeJSON(v any) string {
	switch v := v.(type) {
	case string:
		return excerpt([]byte(v))
	case []byte:
		return excerpt(v)
	case json.RawMessage:
		return excerpt(v)
	}
	text, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return excerpt(text)
}
