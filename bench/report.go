package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report collects the rows of the printed table.
type report struct {
	rows []row
}

type row struct {
	scenario string
	value    string
	compared string // ratios to the baselines
}

func (r *report) add(scenario, value, compared string) {
	r.rows = append(r.rows, row{scenario, value, compared})
	fmt.Printf("  %-58s %s\n", scenario, value) // progress, while the rest runs
}

func (r *report) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tmedian\tcompared")
	fmt.Fprintln(tw, "--------\t------\t--------")
	for _, row := range r.rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", row.scenario, row.value, row.compared)
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
	at := func(q float64) time.Duration { return s[min(int(q*float64(len(s))), len(s)-1)] }
	return percentiles{p50: at(0.50), p99: at(0.99), max: s[len(s)-1]}
}

func (p percentiles) String() string {
	return fmt.Sprintf("p50 %s  p99 %s  max %s", ms(p.p50), ms(p.p99), ms(p.max))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// series is one configuration of a throughput scenario: measure reports
// how many events it moved in how long; rates collects each repetition.
type series struct {
	name    string
	measure func() (int, time.Duration, error)
	rates   []float64
}

// interleave runs every series once per repetition, rotating the order
// from one repetition to the next, so that the drift of a shared machine's
// speed falls on all of them alike.
func interleave(reps int, all ...*series) error {
	for rep := range reps {
		for i := range all {
			s := all[(rep+i)%len(all)]
			n, elapsed, err := s.measure()
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			s.rates = append(s.rates, float64(n)/elapsed.Seconds())
		}
	}
	return nil
}

func (s *series) median() float64 { return median(s.rates) }

// ratioTo is the median, over the repetitions, of s's rate divided by
// base's rate in the same repetition.
func (s *series) ratioTo(base *series) float64 {
	ratios := make([]float64, 0, len(s.rates))
	for i, r := range s.rates {
		if i < len(base.rates) && base.rates[i] > 0 {
			ratios = append(ratios, r/base.rates[i])
		}
	}
	return median(ratios)
}
