package simulator

import "testing"

// The simulated sshd reads names as kubectl mac cp quotes them, and as a
// shell would.
func TestShellWord(t *testing.T) {
	for in, want := range map[string]string{
		"notes.txt":      "notes.txt",
		"'my file.txt'":  "my file.txt",
		`'it'\''s'`:      "it's",
		`'$(rm -rf ~)'`:  "$(rm -rf ~)",
		`a\ b`:           "a b",
		"'/tmp/a:b.bin'": "/tmp/a:b.bin",
	} {
		if got, err := shellWord(in); err != nil || got != want {
			t.Errorf("shellWord(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"a b", "'open", "'a' 'b'"} {
		if got, err := shellWord(in); err == nil {
			t.Errorf("shellWord(%q) = %q; want an error", in, got)
		}
	}
}
