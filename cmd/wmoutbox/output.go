package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// newTabWriter aligns columns separated by tabs, two spaces apart.
func newTabWriter(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// writeTable writes rows under header as aligned columns.
func (c *cli) writeTable(header []string, rows [][]string) error {
	tw := newTabWriter(c.stdout)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// writeJSON writes v as indented JSON and a line break.
func (c *cli) writeJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printf writes a line of text output.
func (c *cli) printf(format string, args ...any) {
	fmt.Fprintf(c.stdout, format, args...)
}
