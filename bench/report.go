package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report collects the rows of the printed table, and those of the table
// of row versions.
type report struct {
	rows     []row
	versions []versionsRow
}

// versionsRow is a drain's row versions per event.
type versionsRow struct {
	scenario string
	v        rowVersions
}

type row struct {
	scenario string
	value    string
	cpu      string // CPU per event, for throughput scenarios
	wal      string // write-ahead log per event, for throughput scenarios
	compared string // ratios to the baselines
}

// add reports a throughput series: its median rate and CPU per event.
func (r *report) add(s *series, compared string) {
	r.addRow(row{scenario: s.name, value: rate(s.median()), cpu: s.cpu(), wal: s.wal(),
		compared: withDuplicates(compared, s.duplicates())})
}

// withDuplicates adds to compared the duplicate deliveries of all a
// series' repetitions, if any: at-least-once delivery allows them, but
// the table does not hide them.
func withDuplicates(compared string, duplicates int) string {
	if duplicates == 0 {
		return compared
	}
	text := fmt.Sprintf("%d duplicate deliveries (all repetitions)", duplicates)
	if compared == "" {
		return text
	}
	return compared + "; " + text
}

// addValue reports a scenario measured otherwise.
func (r *report) addValue(scenario, value, compared string) {
	r.addRow(row{scenario: scenario, value: value, compared: compared})
}

func (r *report) addRow(row row) {
	r.rows = append(r.rows, row)
	fmt.Printf("  %-58s %s  %s  %s\n", row.scenario, row.value, row.cpu, row.wal) // progress, while the rest runs
}

// addVersions reports the row versions per event of a series, if it
// counted them.
func (r *report) addVersions(s *series) {
	if v := s.versions(); v != nil {
		r.versions = append(r.versions, versionsRow{scenario: s.name, v: *v})
	}
}

func (r *report) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tmedian\tCPU per event\tWAL per event\tcompared")
	fmt.Fprintln(tw, "--------\t------\t-------------\t-------------\t--------")
	for _, row := range r.rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", row.scenario, row.value, row.cpu, row.wal, row.compared)
	}
	tw.Flush()
	if len(r.versions) == 0 {
		return
	}
	fmt.Fprintln(w, "\nrow versions per event of the drains' tables (pg_stat_user_tables; the backlog's insert included; medians):")
	fmt.Fprintln(tw, "scenario\tinserted\tupdated (heap-only)\tdeleted\ttotal")
	fmt.Fprintln(tw, "--------\t--------\t-------------------\t-------\t-----")
	for _, row := range r.versions {
		v := row.v
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f (%.2f)\t%.2f\t%.2f\n", row.scenario, v.inserted, v.updated, v.hot, v.deleted, v.total())
	}
	tw.Flush()
}

// median of the values; 0 for none.
func median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(values))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// rate formats events per second with thousands separators.
func rate(perSecond float64) string {
	return thousands(int64(perSecond+0.5)) + " events/s"
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// percentiles of a latency sample: p50, p99 and max.
type percentiles struct{ p50, p99, max time.Duration }

func latencyOf(sample []time.Duration) percentiles {
	if len(sample) == 0 {
		return percentiles{}
	}
	s := slices.Sorted(slices.Values(sample))
	return percentiles{p50: percentile(s, 50), p99: percentile(s, 99), max: s[len(s)-1]}
}

// percentile is the nearest-rank p-th percentile of sorted, which is not
// empty: the smallest value that at least p% of the values do not exceed.
// The rank is worked out in integers, as a float's q*n can land just
// above a whole number and take the next rank.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 · n)
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func (p percentiles) String() string {
	return fmt.Sprintf("p50 %s  p99 %s  max %s", ms(p.p50), ms(p.p99), ms(p.max))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// series is one configuration of a throughput scenario: measure times one
// repetition; windows collects them.
type series struct {
	name    string
	measure func() (window, error)
	windows []window
}

// takeTurns runs each of n configurations once per repetition, in turnOrder,
// so that the drift of a shared machine's speed falls on all of them alike.
func takeTurns(reps, n int, run func(i int) error) error {
	for rep := range reps {
		for _, i := range turnOrder(rep, n) {
			if err := run(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// turnOrder is the order of n configurations in repetition rep: reversed in
// odd repetitions, so that of any two, each runs first in every other
// repetition, and over two repetitions each configuration's mean place is
// the same. (Rotating the order by one left most pairs in the same order
// in most repetitions.)
func turnOrder(rep, n int) []int {
	order := make([]int, n)
	for k := range order {
		order[k] = k
		if rep%2 == 1 {
			order[k] = n - 1 - k
		}
	}
	return order
}

// interleave runs every series once per repetition, taking turns.
func interleave(reps int, all ...*series) error {
	return takeTurns(reps, len(all), func(i int) error {
		s := all[i]
		w, err := s.measure()
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		s.windows = append(s.windows, w)
		return nil
	})
}

// latencySeries is one configuration of the latency scenario: measure
// runs it once and returns every event's latency; runs collects the
// percentiles of each repetition.
type latencySeries struct {
	name, note string
	measure    func() (latencySample, error)
	runs       []percentiles
	duplicates int // over all runs
}

// median is the median over the repetitions of each percentile.
func (l *latencySeries) median() percentiles {
	var p50, p99, most []float64
	for _, p := range l.runs {
		p50, p99, most = append(p50, float64(p.p50)), append(p99, float64(p.p99)), append(most, float64(p.max))
	}
	return percentiles{p50: time.Duration(median(p50)), p99: time.Duration(median(p99)), max: time.Duration(median(most))}
}

// duplicates is the duplicate deliveries of all repetitions.
func (s *series) duplicates() int {
	n := 0
	for _, w := range s.windows {
		n += w.duplicates
	}
	return n
}

// handoffs is the percentiles of the hand-offs of every repetition.
func (s *series) handoffs() percentiles {
	var all []time.Duration
	for _, w := range s.windows {
		all = append(all, w.handoffs...)
	}
	return latencyOf(all)
}

// median is the median rate, events per second.
func (s *series) median() float64 {
	rates := make([]float64, len(s.windows))
	for i, w := range s.windows {
		rates[i] = w.rate()
	}
	return median(rates)
}

// cpu is the median machine and process CPU per event.
func (s *series) cpu() string {
	machine, process := make([]float64, len(s.windows)), make([]float64, len(s.windows))
	for i, w := range s.windows {
		m, p := w.perEvent()
		machine[i], process[i] = float64(m), float64(p)
	}
	return cpuString(time.Duration(median(machine)), time.Duration(median(process)))
}

// versions is the median of each count of row versions per event over
// the repetitions that counted them; nil for none.
func (s *series) versions() *rowVersions {
	var ins, upd, hot, del []float64
	for _, w := range s.windows {
		if v := w.versions; v != nil {
			ins, upd, hot, del = append(ins, v.inserted), append(upd, v.updated), append(hot, v.hot), append(del, v.deleted)
		}
	}
	if len(ins) == 0 {
		return nil
	}
	return &rowVersions{inserted: median(ins), updated: median(upd), hot: median(hot), deleted: median(del)}
}

// walSender is the median CPU per event of a log relay's WAL sender, 0
// when unknown.
func (s *series) walSender() time.Duration {
	var cpu []float64
	for _, w := range s.windows {
		if w.walSender > 0 {
			cpu = append(cpu, float64(w.walSender))
		}
	}
	return time.Duration(median(cpu))
}

// wal is the median log bytes per event.
func (s *series) wal() string {
	bytes := make([]float64, 0, len(s.windows))
	for _, w := range s.windows {
		if b := w.walPerEvent(); b >= 0 {
			bytes = append(bytes, b)
		}
	}
	if len(bytes) == 0 {
		return walString(-1)
	}
	return walString(median(bytes))
}

// ratios are s's rate divided by base's rate in the same repetition, one
// per repetition.
func (s *series) ratios(base *series) []float64 {
	ratios := make([]float64, 0, len(s.windows))
	for i, w := range s.windows {
		if i < len(base.windows) && base.windows[i].rate() > 0 {
			ratios = append(ratios, w.rate()/base.windows[i].rate())
		}
	}
	return ratios
}

// ratioTo is the median of s's ratios to base.
func (s *series) ratioTo(base *series) float64 { return median(s.ratios(base)) }

// comparedTo formats the median ratio of s to base, which the text names,
// and the range of the repetitions' ratios: how far a single repetition
// could be trusted on this machine. "0.86× raw insert (0.81–0.92)".
func (s *series) comparedTo(base *series, name string) string {
	ratios := s.ratios(base)
	text := fmt.Sprintf("%.2f× %s", median(ratios), name)
	if len(ratios) > 1 {
		text += fmt.Sprintf(" (%.2f–%.2f)", slices.Min(ratios), slices.Max(ratios))
	}
	return text
}
