package codec

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
)

// MaxReasonLen is how many characters of a normalised error
// [ErrorGroup] keeps.
const MaxReasonLen = 200

// The parts of an error that differ between events failing for one
// reason, most specific first: an address before the numbers in it.
var (
	uuidPattern = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	ulidPattern = regexp.MustCompile(`\b[0-9A-HJKMNP-TV-Z]{26}\b`)
	addrPattern = regexp.MustCompile(`\[[0-9a-fA-F:.]*:[0-9a-fA-F:.]*\](:\d+)?|\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b|\b[a-zA-Z0-9.-]+:\d{2,5}\b`)
	hexPattern  = regexp.MustCompile(`\b(0x)?[0-9a-fA-F]*[0-9][0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*\b|\b(0x)?[0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*[0-9][0-9a-fA-F]*\b`)
	numPattern  = regexp.MustCompile(`\d+(\.\d+)?`)
)

// ErrorGroup normalises an event's error into the reason it failed for:
// UUIDs and ULIDs become <id>, network addresses <addr>, hexadecimal
// strings of eight or more characters <hex>, and other numbers <n>, so
// that events failing for one reason share it whatever they were about.
// The reason is cut to [MaxReasonLen] characters. The key names the reason
// in 16 hexadecimal characters: what the table's error_group column holds.
func ErrorGroup(err string) (key, reason string) {
	reason = CutError(err)
	reason = uuidPattern.ReplaceAllLiteralString(reason, "<id>")
	reason = ulidPattern.ReplaceAllLiteralString(reason, "<id>")
	reason = addrPattern.ReplaceAllLiteralString(reason, "<addr>")
	reason = hexPattern.ReplaceAllStringFunc(reason, func(s string) string {
		if len(s) < 8 {
			return s
		}
		return "<hex>"
	})
	reason = numPattern.ReplaceAllLiteralString(reason, "<n>")
	if n := 0; len(reason) > MaxReasonLen {
		for i := range reason {
			if n == MaxReasonLen {
				reason = reason[:i]
				break
			}
			n++
		}
	}
	sum := sha256.Sum256([]byte(reason))
	return hex.EncodeToString(sum[:8]), reason
}
