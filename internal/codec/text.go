// Package codec is how the engine stores what the table holds as text:
// headers as a JSON object, and text columns checked for what a database
// refuses (invalid UTF-8, NUL) or cuts (length). The outbox package and
// the relay share it; it imports nothing of the module.
package codec

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxErrorLen is how many characters of an error last_error keeps.
const MaxErrorLen = 4000

// CheckText returns why s cannot be stored in a text column of maxLen
// characters (0: unlimited), or "" when it can.
func CheckText(s string, maxLen int) string {
	switch {
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL byte"
	case maxLen > 0 && utf8.RuneCountInString(s) > maxLen:
		return fmt.Sprintf("longer than %d characters", maxLen)
	}
	return ""
}

// CutError makes s storable as last_error: invalid UTF-8 is replaced, NUL
// bytes are dropped and the text is cut to [MaxErrorLen] characters.
func CutError(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "")
	}
	if len(s) <= MaxErrorLen {
		return s
	}
	n := 0
	for i := range s {
		if n == MaxErrorLen {
			return s[:i]
		}
		n++
	}
	return s
}

// ValidateHeaders returns why headers cannot be stored, or "" when they
// can: keys non-empty, keys and values valid UTF-8 without NUL, at most
// maxSize bytes of keys and values together. Keys are checked in order, so
// that the reason does not depend on the map's.
func ValidateHeaders(headers map[string]string, maxSize int) string {
	size := 0
	for k, v := range headers {
		size += len(k) + len(v)
	}
	if size > maxSize {
		return fmt.Sprintf("%d bytes of keys and values exceeds the limit of %d", size, maxSize)
	}
	for _, k := range slices.Sorted(maps.Keys(headers)) {
		if k == "" {
			return "header key is empty"
		}
		if reason := CheckText(k, 0); reason != "" {
			return fmt.Sprintf("key %q: %s", k, reason)
		}
		if reason := CheckText(headers[k], 0); reason != "" {
			return fmt.Sprintf("value of %q: %s", k, reason)
		}
	}
	return ""
}

// Limits of an inbox record, in characters, which its table's columns
// hold.
const (
	MaxConsumerLen    = 128
	MaxProcessedIDLen = 255
)

// CheckConsumer returns why consumer cannot name a consumer in the inbox,
// or "" when it can.
func CheckConsumer(consumer string) string { return checkName("consumer", consumer, MaxConsumerLen) }

// CheckRecord returns why the inbox cannot record that consumer processed
// the event id, or "" when it can.
func CheckRecord(consumer, id string) string {
	return cmp.Or(CheckConsumer(consumer), checkName("event id", id, MaxProcessedIDLen))
}

func checkName(what, value string, maxLen int) string {
	if value == "" {
		return what + " is empty"
	}
	if reason := CheckText(value, maxLen); reason != "" {
		return what + " " + reason
	}
	return ""
}
