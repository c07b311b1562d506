package watermilladapter

// SettleLinger is settleLinger, for the tests of watermilladapter_test
// that move a test clock through the settler's wait.
const SettleLinger = settleLinger

// The causes of drops, for the tests of watermilladapter_test.
const (
	DropReader = dropReader
	DropQueued = dropQueued
)

// Drops returns how many events s dropped (left to a later claim) for
// cause.
func Drops(s *Subscriber, cause string) int { return s.drops.total(cause) }
