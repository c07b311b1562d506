package outbox

import (
	"strings"
	"time"
	"unicode/utf8"
)

// Event is a stored outbox row: the envelope as written plus its delivery
// state. Stores return events from claims, polls and operator queries.
type Event struct {
	Envelope

	Status Status
	// Attempts counts failed deliveries, including the one that made the
	// event DEAD. Deferrals do not count.
	Attempts int
	// AvailableAt is when the event is next due, claims aside: a claim
	// leaves it alone, so it keeps the event's place in due order.
	AvailableAt time.Time
	// CreatedAt is when the row was written.
	CreatedAt time.Time
	// UpdatedAt is when an outcome was last recorded (the write, for new
	// rows): a status change, a deferral or a replay.
	UpdatedAt time.Time
	// DoneAt is when delivery was acknowledged; zero unless DONE.
	DoneAt time.Time
	// LastError is the error of the last failed attempt; "" if none.
	LastError string
	// LockedBy, LockedAt and LockedUntil describe the current claim, if
	// any: the relay holding it, since when, and when its lease ends (the
	// event is then due again for any relay). All zero without a claim.
	LockedBy    string
	LockedAt    time.Time
	LockedUntil time.Time

	// Malformed is set, and the envelope only partly filled, when the stored
	// row cannot be decoded (for example headers that are not a JSON object
	// of strings). Such an event must not be delivered: the relay marks it
	// DEAD with this error.
	Malformed error
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
