// Package clocktest is the clock of the project's own tests: the test
// kit's [outboxtest.Clock], under the name the tests have always used.
package clocktest

import (
	"time"

	"github.com/wmoutbox/wmoutbox/outboxtest"
)

// Clock is [outboxtest.Clock].
type Clock = outboxtest.Clock

// New returns [outboxtest.NewClock](start).
func New(start time.Time) *Clock { return outboxtest.NewClock(start) }
