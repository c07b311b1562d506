package testdb

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// walLevel is a server whose wal_level is level, or that fails with err.
type walLevel struct {
	level string
	err   error
}

func (w walLevel) QueryRow(context.Context, string, ...any) pgx.Row { return w }

func (w walLevel) Scan(dest ...any) error {
	if w.err != nil {
		return w.err
	}
	*dest[0].(*string) = w.level
	return nil
}

// verdict is a testing.TB that records a skip or a failure, and ends the
// goroutine as testing does; anything else it is asked panics.
type verdict struct {
	testing.TB
	ctx             context.Context
	skipped, failed string
}

func (v *verdict) Helper()                  {}
func (v *verdict) Context() context.Context { return v.ctx }

func (v *verdict) Skipf(format string, args ...any) {
	v.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (v *verdict) Fatalf(format string, args ...any) {
	v.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// judge runs fn on a verdict in a goroutine of its own, which a skip or a
// failure ends.
func judge(ctx context.Context, fn func(v *verdict)) *verdict {
	v := &verdict{ctx: ctx}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(v)
	}()
	<-done
	return v
}

// RequireLogicalDecoding lets a test run on wal_level = logical; on
// another level it skips it, or under CI=true fails it, naming the script
// that fixes it; a server that cannot be asked fails the test.
func TestRequireLogicalDecodingDecides(t *testing.T) {
	for _, c := range []struct {
		name, ci      string
		server        walLevel
		skip, failure string // the start of the message; "" for none
	}{
		{"logical", "", walLevel{level: "logical"}, "", ""},
		{"logical under CI", "true", walLevel{level: "logical"}, "", ""},
		{"replica", "", walLevel{level: "replica"}, "testdb: logical decoding needs wal_level = logical, and the server has replica: run scripts/pg-logical", ""},
		{"replica, CI false", "false", walLevel{level: "replica"}, "testdb: logical decoding needs", ""},
		{"replica under CI", "true", walLevel{level: "replica"}, "", "CI=true, so failing rather than skipping: testdb: logical decoding needs wal_level = logical, and the server has replica: run scripts/pg-logical"},
		{"minimal under CI", "1", walLevel{level: "minimal"}, "", "CI=true, so failing rather than skipping: testdb: logical decoding needs wal_level = logical, and the server has minimal"},
		{"unreachable", "", walLevel{err: errors.New("connection refused")}, "", "testdb: read wal_level: connection refused"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("CI", c.ci)
			v := judge(t.Context(), func(v *verdict) { RequireLogicalDecoding(v, c.server) })
			if c.skip == "" {
				require.Empty(t, v.skipped)
			} else {
				require.Contains(t, v.skipped, c.skip)
			}
			if c.failure == "" {
				require.Empty(t, v.failed)
			} else {
				require.Contains(t, v.failed, c.failure)
			}
		})
	}
}

// The server the tests use has logical decoding where CI runs them:
// .ci/run set it up.
func TestServerHasLogicalDecoding(t *testing.T) {
	t.Parallel()
	RequireLogicalDecoding(t, New(t))
}
