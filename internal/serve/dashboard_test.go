package serve

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/gateway"
)

// metricName finds the series a PromQL query reads: pdmcp's own, and the
// Go and process collectors' it registers.
var metricName = regexp.MustCompile(`\b(?:pdmcp|go|process)_[a-z0-9_]+\b`)

// exported is every series name /metrics shows: each family's name, and a
// histogram's _bucket, _sum and _count.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	m := NewMetrics(func() int { return 0 })
	m.MCPSessions(func() int { return 0 })
	NewUserLimiter(UserLimits{}, func(audit.AuthRefused) bool { return true }, m, slog.New(slog.DiscardHandler))
	m.Connections(newConnTracker(1, 1, 1))
	m.GrantSecondsLeft(func() float64 { return 60 })
	// A vector shows no family until it has a series: one of each.
	m.ToolCall(audit.ToolCall{Tool: "list_approved_documents", Outcome: "ok"}, []gateway.Request{{Route: "/r", Status: 200}})
	m.AuthRefused("no-token", 401)
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
		if f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[f.GetName()+s] = true
			}
		}
	}
	return names
}

// TestDashboardQueriesNameExportedMetrics: every query of the Grafana
// dashboard in deploy/grafana reads only series the server exports, and
// every pdmcp family is on some panel.
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "pdmcp.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if dash.UID == "" || dash.Title == "" || len(dash.Panels) == 0 {
		t.Fatalf("the dashboard has no uid, title or panels")
	}
	names := exported(t)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			found := metricName.FindAllString(q.Expr, -1)
			if len(found) == 0 {
				t.Errorf("panel %q: query %q reads no metric", p.Title, q.Expr)
			}
			for _, n := range found {
				if !names[n] {
					t.Errorf("panel %q reads %s, which the server does not export", p.Title, n)
				}
				used[strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count")] = true
			}
		}
	}
	var unused []string
	for n := range names {
		if strings.HasPrefix(n, "pdmcp_") && !used[n] && !strings.HasSuffix(n, "_bucket") && !strings.HasSuffix(n, "_sum") && !strings.HasSuffix(n, "_count") {
			unused = append(unused, n)
		}
	}
	slices.Sort(unused)
	if len(unused) > 0 {
		t.Errorf("pdmcp metrics on no panel: %v", unused)
	}
}
