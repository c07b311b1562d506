// Package logtest captures what a *slog.Logger logs, for tests that
// check what the library says and at which level.
package logtest

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// Record is one captured line: its level, message and attributes (groups
// flattened, their keys joined with dots).
type Record struct {
	Level slog.Level
	Msg   string
	Attrs map[string]any
}

// Capture is a slog.Handler keeping every record it handles. It is safe
// for concurrent use.
type Capture struct {
	log   *captured
	attrs []slog.Attr
}

type captured struct {
	mu      sync.Mutex
	records []Record
}

// New returns a logger writing into a new Capture, at every level.
func New() (*slog.Logger, *Capture) {
	c := &Capture{log: &captured{}}
	return slog.New(c), c
}

// Enabled implements slog.Handler: every level.
func (*Capture) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (c *Capture) Handle(_ context.Context, r slog.Record) error {
	rec := Record{Level: r.Level, Msg: r.Message, Attrs: make(map[string]any)}
	for _, a := range c.attrs {
		rec.Attrs[a.Key] = a.Value.Resolve().Any()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.Resolve().Any()
		return true
	})
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	c.log.records = append(c.log.records, rec)
	return nil
}

// WithAttrs implements slog.Handler.
func (c *Capture) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Capture{log: c.log, attrs: append(slices.Clip(c.attrs), attrs...)}
}

// WithGroup implements slog.Handler; groups are not kept apart.
func (c *Capture) WithGroup(string) slog.Handler { return c }

// Records returns the records captured so far.
func (c *Capture) Records() []Record {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	return slices.Clone(c.log.records)
}

// Find returns the records of level with message msg.
func (c *Capture) Find(level slog.Level, msg string) []Record {
	var found []Record
	for _, r := range c.Records() {
		if r.Level == level && r.Msg == msg {
			found = append(found, r)
		}
	}
	return found
}
