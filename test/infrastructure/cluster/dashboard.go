package cluster

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// DashboardPanel is a panel of the shipped Grafana dashboard: its title and
// the PromQL of its queries.
type DashboardPanel struct {
	Title   string
	Queries []string
}

// Dashboard reads config/grafana/macvirt-dashboard.json.
func Dashboard() ([]DashboardPanel, error) {
	raw, err := os.ReadFile(filepath.Join(RepoRoot(), "config", "grafana", "macvirt-dashboard.json"))
	if err != nil {
		return nil, err
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, err
	}
	out := make([]DashboardPanel, 0, len(d.Panels))
	for _, p := range d.Panels {
		panel := DashboardPanel{Title: p.Title}
		for _, t := range p.Targets {
			panel.Queries = append(panel.Queries, t.Expr)
		}
		out = append(out, panel)
	}
	return out, nil
}
