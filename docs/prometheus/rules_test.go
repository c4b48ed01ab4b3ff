package prometheus

import (
	"bytes"
	"os"
	"os/exec"
	"rackd/internal/netnstest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

const (
	rulesFile     = "rackd-alerts.yml"
	rulesTestFile = "rackd-alerts_test.yml"
	dashboardFile = "../grafana/rackd.json"
)

// TestRulesPromtool checks the rules with Prometheus' own promtool, and runs
// their unit tests (synthetic series, each alert firing and not firing).
func TestRulesPromtool(t *testing.T) {
	promtool := netnstest.Tool(t, "promtool")
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		cmd := exec.Command(promtool, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s has no rules", rulesFile)
	}
	return rules
}

// recordName is Prometheus' naming convention for recorded series,
// level:metric:operations.
var recordName = regexp.MustCompile(`^rackd:[a-z0-9_]+:[a-z0-9_]+$`)

// TestRulesConventions holds the rules to what an operator needs of an
// alert (a severity to route on, a summary and a description that says
// what to do, a for: that rides out a blip) and checks that the unit tests
// show every alert both firing and not firing.
func TestRulesConventions(t *testing.T) {
	rules := loadRules(t)
	seen := map[string]bool{}
	var alerts []string
	for _, r := range rules {
		name := r.Alert + r.Record
		if seen[name] {
			t.Errorf("%s is defined twice", name)
		}
		seen[name] = true
		if r.Record != "" {
			if !recordName.MatchString(r.Record) {
				t.Errorf("recording rule %s: name it rackd:metric:operation", r.Record)
			}
			continue
		}
		alerts = append(alerts, r.Alert)
		if !strings.HasPrefix(r.Alert, "Rackd") {
			t.Errorf("alert %s: name it Rackd...", r.Alert)
		}
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
		}
		if r.Annotations["summary"] == "" || len(r.Annotations["description"]) < 80 {
			t.Errorf("alert %s: wants a summary and a description that tells the operator what to do", r.Alert)
		}
		if d, err := time.ParseDuration(r.For); err != nil || d <= 0 {
			t.Errorf("alert %s: for %q, want a duration above zero", r.Alert, r.For)
		}
	}

	b, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				AlertName string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tests); err != nil {
		t.Fatalf("%s: %v", rulesTestFile, err)
	}
	if !slices.Equal(tests.RuleFiles, []string{rulesFile}) {
		t.Errorf("%s tests %v, want [%s]", rulesTestFile, tests.RuleFiles, rulesFile)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if !slices.Contains(alerts, a.AlertName) {
				t.Errorf("%s tests alert %s, which %s does not have", rulesTestFile, a.AlertName, rulesFile)
			}
			if len(a.ExpAlerts) > 0 {
				fires[a.AlertName] = true
			} else {
				quiet[a.AlertName] = true
			}
		}
	}
	for _, a := range alerts {
		if !fires[a] || !quiet[a] {
			t.Errorf("%s does not show alert %s both firing (%v) and not firing (%v)", rulesTestFile, a, fires[a], quiet[a])
		}
	}
}
