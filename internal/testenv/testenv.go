// Package testenv decides what a test does when a server it needs is not
// there. Tests only.
package testenv

import (
	"os"
	"strconv"
	"testing"
)

// SkipOrFail skips the test with the message, or fails it when CI=true:
// on CI a missing server is a broken setup, and a skip must not pass for
// green.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("CI=true, so failing rather than skipping: "+format, args...)
	}
	t.Skipf(format, args...)
}
