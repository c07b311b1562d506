package outboxdriver

import "time"

// ConfirmedAge returns how long before now the slot's position was last
// confirmed: 0 when ConfirmedAt is zero (no feed of this module read it,
// so its age is unknown) or after now (another host's clock ahead).
func (s LogSlot) ConfirmedAge(now time.Time) time.Duration {
	if s.ConfirmedAt.IsZero() {
		return 0
	}
	return max(now.Sub(s.ConfirmedAt), 0)
}
