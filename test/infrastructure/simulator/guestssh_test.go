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

// echo prints its words as zsh would, quotes taken off; GitLab's fleeting
// harness runs echo 'hello world' on each instance.
func TestEcho(t *testing.T) {
	d := &guestSSHD{}
	for in, want := range map[string]string{
		"echo 'hello world'":       "hello world\n",
		`echo  a   "b  c"  d\ e`:   "a b  c d e\n",
		`echo "say \"hi\"" 'x'"y"`: "say \"hi\" xy\n",
		"echo":                     "\n",
	} {
		if got, code := d.run(in); got != want || code != 0 {
			t.Errorf("run(%q) = %q, %d; want %q, 0", in, got, code, want)
		}
	}
	if _, code := d.run("echo 'open"); code == 0 {
		t.Error("an unterminated quote: exit 0")
	}
}
