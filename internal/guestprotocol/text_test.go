package guestprotocol_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// What a guest writes reaches people's terminals; nothing in it may act on
// the terminal, and a sequence goes whole, leaving no debris like "[31m".
func TestPrintableTakesOutWhatATerminalWouldActOn(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"plain text":                          {"exit status 1: no such file", "exit status 1: no such file"},
		"newlines and tabs stay":              {"line 1\n\tline 2\n", "line 1\n\tline 2\n"},
		"CSI colours":                         {"\x1b[1;31merror\x1b[0m: denied", "error: denied"},
		"CSI 256 and true colour":             {"\x1b[38;5;196mred\x1b[48;2;0;0;0m on black\x1b[m", "red on black"},
		"CSI private mode (hide the cursor)":  {"a\x1b[?25lb", "ab"},
		"cursor moves and erasing":            {"ok\x1b[2A\x1b[10;1H\x1b[2K\x1b[1GFAILED", "okFAILED"},
		"OSC title ended by BEL":              {"\x1b]0;evil\x07done", "done"},
		"OSC ended by ST":                     {"\x1b]2;evil\x1b\\done", "done"},
		"OSC 8 hyperlink":                     {"\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\", "click"},
		"OSC 52 clipboard write":              {"\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07x", "x"},
		"an unterminated OSC runs to the end": {"before\x1b]0;evil", "before"},
		"DCS":                                 {"a\x1bP1$r0m\x1b\\b", "ab"},
		"APC, PM and SOS":                     {"a\x1b_x\x1b\\b\x1b^y\x07c\x1bXz\x1b\\d", "abcd"},
		"ESC c resets the terminal":           {"a\x1bcb", "ab"},
		"ESC 7 and ESC 8 save and restore":    {"a\x1b7b\x1b8c", "abc"},
		"charset designation ESC ( 0":         {"a\x1b(0b\x1b(Bc", "abc"},
		"bare ESC at the end":                 {"abc\x1b", "abc"},
		"bare ESC before a newline":           {"abc\x1b\nd", "abc\nd"},
		"ESC before a non-ASCII letter":       {"a\x1bé", "aé"},
		"C1 CSI as UTF-8 (U+009B)":            {"a\u009b31mb", "ab"},
		"C1 CSI as a raw byte 0x9b":           {"a\x9b31mb", "ab"},
		"C1 OSC as UTF-8, ended by C1 ST":     {"a\u009d0;evil\u009cb", "ab"},
		"other C1 controls":                   {"a\u0085b\u0084c", "abc"},
		"carriage return":                     {"progress 10%\rprogress 100%\r\n", "progress 10%progress 100%\n"},
		"backspace, bell, NUL, DEL":           {"a\bb\ac\x00d\x7fe", "abcde"},
		"vertical tab and form feed":          {"a\vb\fc", "abc"},
		"accented characters stay":            {"Échec: fichier « données » introuvable; Größe; ñandú", "Échec: fichier « données » introuvable; Größe; ñandú"},
		"emoji stay, joined ones too":         {"done ✅ 🍎 👩‍💻 🇫🇷", "done ✅ 🍎 👩‍💻 🇫🇷"},
		"CJK stays":                           {"失敗しました", "失敗しました"},
		"a continuation byte 0x9c stays":      {"✜", "✜"},
		"invalid UTF-8 goes":                  {"caf\xe9 \xff\xfeok \xc3", "caf ok "},
		"a replacement character sent stays":  {"bad byte: \uFFFD", "bad byte: \uFFFD"},
		"an escape split by invalid bytes":    {"\x1b\xff[31mred", "[31mred"},
		"empty":                               {"", ""},
	} {
		if got := guestprotocol.Printable(tc.in); got != tc.want {
			t.Errorf("%s: Printable(%q) = %q, want %q", name, tc.in, got, tc.want)
		}
	}
}

// Whatever comes in, what comes out is valid UTF-8 with no control but
// newline and tab, and no longer: the protocol's bounds hold for it.
func FuzzPrintable(f *testing.F) {
	for _, s := range []string{"\x1b[31mred", "\x1b]0;evil\x07", "\x9b1m", "\u009d0;x\u009c", "é👩‍💻", "\xff\x1b", "\x1bP\x1b\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := guestprotocol.Printable(s)
		if len(got) > len(s) {
			t.Errorf("Printable(%q) = %q, longer than what came in", s, got)
		}
		if !utf8.ValidString(got) {
			t.Errorf("Printable(%q) = %q, not UTF-8", s, got)
		}
		if i := strings.IndexFunc(got, func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' || r >= 0x7f && r <= 0x9f }); i >= 0 {
			t.Errorf("Printable(%q) = %q keeps a control character at byte %d", s, got, i)
		}
		if again := guestprotocol.Printable(got); again != got {
			t.Errorf("Printable is not idempotent: %q, then %q", got, again)
		}
	})
}
