package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// EncodeHeaders encodes headers as a JSON object, the stored form. Empty
// headers encode to nil (stored as NULL). Headers that passed envelope
// validation (valid UTF-8, no NUL, non-empty keys) decode back unchanged.
func EncodeHeaders(headers map[string]string) ([]byte, error) {
	if len(headers) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(headers)
	if err != nil {
		return nil, fmt.Errorf("outbox: encode headers: %w", err)
	}
	return b, nil
}

// DecodeHeaders decodes stored headers. NULL (nil), empty input and the JSON
// literal null decode to nil. Anything but a JSON object of string values
// with non-empty keys is an error: such a row is malformed. So are a null
// value and bytes that are not UTF-8, which encoding/json would quietly
// turn into "" and U+FFFD: headers nobody wrote.
func DecodeHeaders(data []byte) (map[string]string, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || bytes.Equal(data, []byte("null")) {
		return nil, nil
	}
	if data[0] != '{' {
		return nil, fmt.Errorf("outbox: decode headers: not a JSON object")
	}
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("outbox: decode headers: not valid UTF-8")
	}
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
	for k, v := range headers {
		if k == "" {
			return nil, fmt.Errorf("outbox: decode headers: empty key")
		}
		if reason := checkText(k, 0); reason != "" {
			return nil, fmt.Errorf("outbox: decode headers: key %q: %s", k, reason)
		}
		if reason := checkText(v, 0); reason != "" {
			return nil, fmt.Errorf("outbox: decode headers: value of %q: %s", k, reason)
		}
	}
	if len(headers) == 0 {
		return nil, nil
	}
	return headers, nil
}
