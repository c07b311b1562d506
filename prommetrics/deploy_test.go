package prommetrics_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/testenv"
	"github.com/wmoutbox/wmoutbox/prommetrics"
)

// The files of deploy/ that query this package's series.
const (
	dashboardFile  = "../deploy/grafana/wmoutbox.json"
	alertsFile     = "../deploy/prometheus/alerts.yml"
	operationsFile = "../docs/operations.md"
)

// seriesName matches a series name of the default namespace in a query.
var seriesName = regexp.MustCompile(`\boutbox_[a-z_]+\b`)

// tableWide are the series the topic variable does not select: those
// without a topic label (the database's log slots among them), and the
// unserved topics, which the variable (the served topics) cannot list.
var tableWide = map[string]bool{
	"outbox_purged_rows_total": true, "outbox_unserved_events": true,
	"outbox_log_slot_lag_bytes": true, "outbox_log_slot_confirmed_age_seconds": true,
}

// exportedSeries returns the names a query can select among the series
// New registers (a histogram's _bucket, _sum and _count), and the
// families themselves.
func exportedSeries(t *testing.T) (queryable map[string]bool, families []string) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := prommetrics.New(reg, prommetrics.Config{})
	require.NoError(t, err)
	// One of each, so that every family has a series to gather.
	m.HotEnqueued("orders")
	m.HotDropped("orders")
	m.ColdEnqueued("orders", 1)
	m.Delivered("orders", time.Millisecond)
	m.Failed("orders")
	m.Dead("orders")
	m.AddQueueDepths("orders", 1, 1)
	m.Backlog("orders", 1, time.Second)
	m.StoreError("orders", "claim")
	m.DeadEvents("orders", 1)
	m.Handled("orders", true, time.Millisecond)
	m.Purged("done", 1)
	m.Unserved("invoices", 1)
	m.LogSlot("outbox_orders", 1, time.Second)
	gathered, err := reg.Gather()
	require.NoError(t, err)
	queryable = map[string]bool{}
	for _, f := range gathered {
		families = append(families, f.GetName())
		if f.GetType().String() == "HISTOGRAM" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				queryable[f.GetName()+suffix] = true
			}
			continue
		}
		queryable[f.GetName()] = true
	}
	return queryable, families
}

// dashboard is what the tests read of the Grafana dashboard.
type dashboard struct {
	SchemaVersion int `json:"schemaVersion"`
	UID           string
	Panels        []struct {
		ID         int
		Type       string
		Title      string
		Datasource struct{ Type, UID string }
		GridPos    struct{ X, Y, W, H int }
		Targets    []struct {
			Expr  string
			RefID string `json:"refId"`
		}
	}
	Templating struct {
		List []struct {
			Type, Name string
			Query      any
			Definition string
		}
	}
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(raw, &d), "the dashboard is JSON")
	return d
}

// The dashboard plots every series New registers, by the names it
// registers them under, from the data source its variable picks, for the
// topics its variable picks: a renamed series fails here rather than
// leave a panel blank.
func TestDashboardQueriesTheExportedSeries(t *testing.T) {
	t.Parallel()
	queryable, families := exportedSeries(t)
	d := readDashboard(t)
	require.GreaterOrEqual(t, d.SchemaVersion, 39)
	require.NotEmpty(t, d.UID)

	var variables []string
	for _, v := range d.Templating.List {
		variables = append(variables, v.Type+" "+v.Name)
		if v.Name == "topic" {
			for _, name := range seriesName.FindAllString(v.Definition, -1) {
				require.True(t, queryable[name], "the topic variable's query names %s, which New does not register", name)
			}
		}
	}
	require.Equal(t, []string{"datasource datasource", "query topic"}, variables)

	used := map[string]bool{}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		require.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
		require.LessOrEqual(t, p.GridPos.X+p.GridPos.W, 24, "panel %q is wider than the grid", p.Title)
		if p.Type == "row" {
			continue
		}
		require.Equal(t, "${datasource}", p.Datasource.UID, "panel %q", p.Title)
		require.NotEmpty(t, p.Targets, "panel %q", p.Title)
		for _, target := range p.Targets {
			names := seriesName.FindAllString(target.Expr, -1)
			if !slices.ContainsFunc(names, func(name string) bool { return tableWide[name] }) {
				require.Contains(t, target.Expr, `topic=~"$topic`, "panel %q follows the topic variable", p.Title)
			}
			require.NotEmpty(t, names, "panel %q: %s", p.Title, target.Expr)
			for _, name := range names {
				require.True(t, queryable[name], "panel %q queries %s, which New does not register", p.Title, name)
				used[name] = true
			}
		}
	}
	for _, family := range families {
		require.True(t, used[family] || used[family+"_bucket"], "no panel shows %s", family)
	}
}

// The alert rules query series New registers, and their runbook links
// lead to sections of docs/operations.md.
func TestAlertRulesQueryTheExportedSeries(t *testing.T) {
	t.Parallel()
	queryable, _ := exportedSeries(t)
	raw, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	rules := string(raw)
	names := seriesName.FindAllString(rules, -1)
	require.NotEmpty(t, names)
	for _, name := range names {
		require.True(t, queryable[name], "alerts.yml names %s, which New does not register", name)
	}

	anchors := markdownAnchors(t, operationsFile)
	dashboardRaw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	links := regexp.MustCompile(`docs/operations\.md#([a-z0-9_-]+)`)
	found := links.FindAllStringSubmatch(rules+string(dashboardRaw), -1)
	require.NotEmpty(t, found)
	for _, link := range found {
		require.True(t, anchors[link[1]], "%s links to #%s, no heading of %s", link[0], link[1], operationsFile)
	}
	for _, alert := range regexp.MustCompile(`(?m)^\s+- alert: (\w+)$`).FindAllStringSubmatch(rules, -1) {
		require.Contains(t, rules, "operations.md#"+strings.ToLower(alert[1]), "alert %s has its runbook section", alert[1])
	}
}

// markdownAnchors returns the anchors GitHub gives the headings of the
// Markdown file at path.
func markdownAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	anchors := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for line := range strings.Lines(string(raw)) {
		heading, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "#")
		if !ok {
			continue
		}
		heading = strings.TrimSpace(strings.TrimLeft(heading, "#"))
		anchors[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(heading), ""), " ", "-")] = true
	}
	return anchors
}

// promtool parses the dashboard's queries, with Grafana's variables
// replaced, as the expressions of recording rules: a query that does not
// parse fails here rather than in Grafana. Without promtool on PATH (make
// alerts-check says how to install it) the test skips, or fails under
// CI=true.
func TestDashboardQueriesParse(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		testenv.SkipOrFail(t, "promtool is not on PATH (Debian: apt-get install prometheus): %v", err)
	}
	d := readDashboard(t)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	replacer := strings.NewReplacer("$__rate_interval", "5m", "$topic", ".*")
	var n int
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			expr, err := json.Marshal(replacer.Replace(target.Expr)) // a YAML double-quoted string too
			require.NoError(t, err)
			fmt.Fprintf(&rules, "      - record: dashboard:panel_%d_%s\n        expr: %s\n", p.ID, target.RefID, expr)
			n++
		}
	}
	require.Positive(t, n)
	file := filepath.Join(t.TempDir(), "dashboard.yml")
	require.NoError(t, os.WriteFile(file, []byte(rules.String()), 0o600))
	out, err := exec.CommandContext(t.Context(), promtool, "check", "rules", file).CombinedOutput()
	require.NoError(t, err, "promtool check rules on the dashboard's queries:\n%s", out)
	require.True(t, slices.Contains(strings.Fields(string(out)), "SUCCESS:"), "%s", out)
}
