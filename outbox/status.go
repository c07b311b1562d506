package outbox

import "strconv"

// Status is the delivery state of a stored event. The numeric codes are the
// ones stored in the status column and are part of the table's contract.
type Status int16

const (
	// StatusNew is a freshly written event awaiting its first delivery.
	StatusNew Status = 0
	// StatusDone is an event whose delivery was acknowledged. Done rows are
	// never changed again by status updates.
	StatusDone Status = 1
	// StatusRetry is an event whose delivery failed and that is scheduled for
	// another attempt at its available_at time.
	StatusRetry Status = 2
	// StatusDead is an event that exhausted its attempts or failed
	// permanently. It stays until replayed or purged.
	StatusDead Status = 3
)

// String returns the status name: NEW, DONE, RETRY or DEAD.
func (s Status) String() string {
	switch s {
	case StatusNew:
		return "NEW"
	case StatusDone:
		return "DONE"
	case StatusRetry:
		return "RETRY"
	case StatusDead:
		return "DEAD"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Pending reports whether the event still awaits delivery (NEW or RETRY).
func (s Status) Pending() bool { return s == StatusNew || s == StatusRetry }

// Terminal reports whether the event is finished (DONE or DEAD).
func (s Status) Terminal() bool { return s == StatusDone || s == StatusDead }
