package codec

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// EncodeHeaders encodes headers as a JSON object, the stored form. Empty
// headers encode to "" (stored as NULL). Headers that pass
// [ValidateHeaders] decode back unchanged.
func EncodeHeaders(headers map[string]string) (string, error) {
	if len(headers) == 0 {
		return "", nil
	}
	if b, ok := encodePlainObject(headers); ok {
		return string(b), nil
	}
	b, err := json.Marshal(headers)
	if err != nil {
		return "", fmt.Errorf("outbox: encode headers: %w", err)
	}
	return string(b), nil
}

// encodePlainObject encodes the common case of headers, printable ASCII
// that JSON takes as it is, without encoding/json and its reflection: the
// same bytes, keys sorted as encoding/json sorts them. It reports false
// for anything else, which encoding/json then encodes.
func encodePlainObject(headers map[string]string) ([]byte, bool) {
	keys := make([]string, 0, len(headers))
	size := 2
	for k, v := range headers {
		if !plainASCII(k) || !plainASCII(v) {
			return nil, false
		}
		keys = append(keys, k)
		size += len(k) + len(v) + 6
	}
	slices.Sort(keys)
	b := append(make([]byte, 0, size), '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, `":"`...)
		b = append(b, headers[k]...)
		b = append(b, '"')
	}
	return append(b, '}'), true
}

// plainASCII reports whether encoding/json writes s as it is: printable
// ASCII with no quote, backslash, or the characters it escapes for HTML.
func plainASCII(s string) bool {
	for i := range len(s) {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// DecodeHeaders decodes stored headers. NULL (""), JSON whitespace alone
// and the JSON literal null decode to nil. Anything but a JSON object of
// string values with non-empty keys is an error: such a row is malformed.
// So are a null value and bytes that are not UTF-8, which encoding/json
// would quietly turn into "" and U+FFFD: headers nobody wrote. The common
// case, a plain object, shares the memory of data.
func DecodeHeaders(data string) (map[string]string, error) {
	data = strings.TrimFunc(data, func(r rune) bool { return r < utf8.RuneSelf && isJSONSpace(byte(r)) })
	if len(data) == 0 || data == "null" {
		return nil, nil
	}
	if data[0] != '{' {
		return nil, fmt.Errorf("outbox: decode headers: not a JSON object")
	}
	if !utf8.ValidString(data) {
		return nil, fmt.Errorf("outbox: decode headers: not valid UTF-8")
	}
	headers, ok := decodePlainObject(data)
	if !ok {
		var err error
		if headers, err = decodeObject([]byte(data)); err != nil {
			return nil, err
		}
	}
	for k, v := range headers {
		if k == "" {
			return nil, fmt.Errorf("outbox: decode headers: empty key")
		}
		if reason := CheckText(k, 0); reason != "" {
			return nil, fmt.Errorf("outbox: decode headers: key %q: %s", k, reason)
		}
		if reason := CheckText(v, 0); reason != "" {
			return nil, fmt.Errorf("outbox: decode headers: value of %q: %s", k, reason)
		}
	}
	if len(headers) == 0 {
		return nil, nil
	}
	return headers, nil
}

// decodeObject decodes a JSON object of string values with encoding/json.
func decodeObject(data []byte) (map[string]string, error) {
	var stored map[string]*string
	if err := json.Unmarshal(data, &stored); err != nil {
		return nil, fmt.Errorf("outbox: decode headers: %w", err)
	}
	headers := make(map[string]string, len(stored))
	for k, v := range stored {
		if v == nil {
			return nil, fmt.Errorf("outbox: decode headers: value of %q is null", k)
		}
		headers[k] = *v
	}
	return headers, nil
}

// decodePlainObject decodes the common case of stored headers, a JSON
// object whose keys and values are strings with no escape, as PostgreSQL
// prints most jsonb: its keys and values share the memory of data, so a
// row's headers cost one string and one map. It reports false for
// anything else (an escape, a control character, a value that is not a
// string, malformed JSON), which decodeObject then decodes or rejects, so
// that both give the same answer for every input. data must be valid
// UTF-8.
func decodePlainObject(data string) (map[string]string, bool) {
	headers := make(map[string]string)
	i := skipSpace(data, 1)
	if i < len(data) && data[i] == '}' {
		return headers, skipSpace(data, i+1) == len(data)
	}
	for {
		key, next, ok := plainString(data, i)
		if !ok {
			return nil, false
		}
		i = skipSpace(data, next)
		if i == len(data) || data[i] != ':' {
			return nil, false
		}
		value, next, ok := plainString(data, skipSpace(data, i+1))
		if !ok {
			return nil, false
		}
		headers[key] = value
		i = skipSpace(data, next)
		if i == len(data) {
			return nil, false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return headers, skipSpace(data, i+1) == len(data)
		default:
			return nil, false
		}
	}
}

// plainString reads the JSON string starting at data[i] if it has no
// escape and no control character, and returns it and the index after it.
func plainString(data string, i int) (s string, next int, ok bool) {
	if i >= len(data) || data[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return data[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return "", 0, false
		}
	}
	return "", 0, false
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(data string, i int) int {
	for i < len(data) && isJSONSpace(data[i]) {
		i++
	}
	return i
}

// isJSONSpace reports whether c is whitespace JSON allows between tokens;
// Unicode's other spaces are not JSON.
func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
