package outbox

import "time"

// Event is a stored outbox row: the envelope as written plus its delivery
// state, as [Store.Get] and [Store.QueryDead] return it.
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
	// ErrorGroup is the failure group of LastError ([DeadGroup.Group]),
	// recorded with it; "" when the event has not failed or failed before
	// the table recorded groups.
	ErrorGroup string
	// LockedBy, LockedAt and LockedUntil describe the current claim, if
	// any: the relay holding it, since when, and when its lease ends (the
	// event is then due again for any relay). All zero without a claim.
	LockedBy    string
	LockedAt    time.Time
	LockedUntil time.Time

	// Malformed is set, and the envelope only partly filled, when the stored
	// row cannot be decoded (for example headers that are not a JSON object
	// of strings). A relay does not deliver such an event: it marks it DEAD
	// with this error.
	Malformed error
}
