package kubectlmac

import (
	"strings"
	"testing"
)

func TestParseForwardSpec(t *testing.T) {
	for arg, want := range map[string]forwardSpec{
		"22":        {local: 22, remote: 22},
		"2222:22":   {local: 2222, remote: 22},
		"0:5900":    {local: 0, remote: 5900},
		":22":       {local: 0, remote: 22},
		"5901:5900": {local: 5901, remote: 5900},
	} {
		if got, err := parseForwardSpec(arg); err != nil || got != want {
			t.Errorf("parseForwardSpec(%q) = %+v, %v; want %+v", arg, got, err, want)
		}
	}
	for arg, msg := range map[string]string{
		"ssh":     "want [LOCAL:]REMOTE",
		"22:0":    "want [LOCAL:]REMOTE",
		"x:22":    `the local port "x" is not a port number`,
		"70000":   "want [LOCAL:]REMOTE",
		"1:2:3":   "want [LOCAL:]REMOTE",
		"-1:22":   "is not a port number",
		"2222:-1": "want [LOCAL:]REMOTE",
	} {
		if got, err := parseForwardSpec(arg); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("parseForwardSpec(%q) = %+v, %v; want an error saying %q", arg, got, err, msg)
		}
	}
}

func TestParseMacPath(t *testing.T) {
	for arg, want := range map[string]macPath{
		"build:notes.txt":    {claim: "build", path: "notes.txt"},
		"build:/tmp/a:b":     {claim: "build", path: "/tmp/a:b"},
		"build:":             {claim: "build", path: ""},
		"notes.txt":          {path: "notes.txt"},
		"./a:b":              {path: "./a:b"},
		"/abs/a:b":           {path: "/abs/a:b"},
		"dir/a:b":            {path: "dir/a:b"},
		"-":                  {path: "-"},
		":no-claim":          {path: ":no-claim"},
		"team.build:log.txt": {claim: "team.build", path: "log.txt"},
	} {
		if got := parseMacPath(arg); got != want {
			t.Errorf("parseMacPath(%q) = %+v, want %+v", arg, got, want)
		}
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"notes.txt":       `'notes.txt'`,
		"my file.txt":     `'my file.txt'`,
		"it's":            `'it'\''s'`,
		"$(rm -rf ~)":     `'$(rm -rf ~)'`,
		"a;b|c&d`e`\"f\"": `'a;b|c&d` + "`e`" + `"f"'`,
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
