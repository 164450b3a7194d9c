package guestprotocol

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Printable is s without what a terminal would act on: every escape
// sequence (ECMA-48's CSI, such as colours and cursor moves; control strings
// such as OSC, which sets a window's title, makes hyperlinks or writes the
// clipboard, and DCS, SOS, PM and APC; and the short ESC sequences, such as
// ESC c, a reset), every other C0 and C1 control character but newline and
// tab, and bytes that are not UTF-8.
//
// What an agent reports (why it could not apply the desired state, a task's
// message and output) is written by whatever runs in the guest, and people
// read it in their terminals: in claims' conditions, in kubectl get -o yaml,
// in kubectl mac. A sequence goes whole, since taking out only its ESC
// leaves the rest of it ("[31m") in the text. A C1 control counts as one
// whether it comes as UTF-8 (U+009B) or as the bare byte (0x9b) a terminal
// that is not in UTF-8 mode reads as the same control. Bytes that are not
// UTF-8 are dropped rather than replaced, so the result is never longer
// than s and every byte limit on s holds for it.
func Printable(s string) string {
	if plain(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := decodeControl(s[i:])
		switch {
		case r == esc:
			n += escapeLen(s[i+n:])
		case r == c1CSI:
			n += csiLen(s[i+n:])
		case r == c1OSC || r == c1DCS || r == c1SOS || r == c1PM || r == c1APC:
			n += controlStringLen(s[i+n:])
		case r == '\n' || r == '\t':
			b.WriteByte(s[i])
		case r == utf8.RuneError && n == 1, unicode.IsControl(r):
			// Not UTF-8, or a control character: dropped.
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// plain reports whether s is printable ASCII, newlines and tabs only: most
// of what agents send, and returned as it is.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 || c > 0x7e) && c != '\n' && c != '\t' {
			return false
		}
	}
	return true
}

const (
	esc = 0x1b
	bel = 0x07
	// can and sub cancel a sequence in the VT terminals' parsers.
	can = 0x18
	sub = 0x1a
	// The C1 controls that begin a sequence or end a control string.
	c1DCS = 0x90
	c1SOS = 0x98
	c1CSI = 0x9b
	c1ST  = 0x9c
	c1OSC = 0x9d
	c1PM  = 0x9e
	c1APC = 0x9f
)

// decodeControl is the first rune of s and its length, with a byte 0x80 to
// 0x9f that is not part of UTF-8 read as the C1 control of that value.
func decodeControl(s string) (rune, int) {
	r, n := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && n == 1 && s[0] >= 0x80 && s[0] <= 0x9f {
		return rune(s[0]), 1
	}
	return r, n
}

// escapeLen is the length of the escape sequence whose ESC came just before
// s, without the ESC. An ESC followed by nothing a sequence may continue
// with is one on its own (0).
func escapeLen(s string) int {
	if s == "" {
		return 0
	}
	switch c := s[0]; {
	case c == '[':
		return 1 + csiLen(s[1:])
	case c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_':
		return 1 + controlStringLen(s[1:])
	case c >= 0x20 && c <= 0x2f:
		// Intermediate bytes, then a final byte (ESC ( B).
		n := 1
		for n < len(s) && s[n] >= 0x20 && s[n] <= 0x2f {
			n++
		}
		if n < len(s) && s[n] >= 0x30 && s[n] <= 0x7e {
			n++
		}
		return n
	case c >= 0x30 && c <= 0x7e:
		// A single final byte (ESC 7, ESC c, ESC M).
		return 1
	}
	return 0
}

// csiLen is the length of a control sequence's parameters, intermediates
// and final byte (31m, ?25l, 10;1H), after its introducer. It ends early at
// any byte none of them may be, which is then read as text again.
func csiLen(s string) int {
	n := 0
	for n < len(s) && s[n] >= 0x20 && s[n] <= 0x3f {
		n++
	}
	if n < len(s) && s[n] >= 0x40 && s[n] <= 0x7e {
		n++
	}
	return n
}

// controlStringLen is the length of a control string after its introducer,
// up to and with its end: BEL, ST (ESC \ or C1 ST), or CAN or SUB, which
// cancel it. Another ESC ends it too and begins the next sequence; a string
// left open runs to the end of s, as it would swallow what follows on a
// terminal.
func controlStringLen(s string) int {
	for n := 0; n < len(s); {
		r, size := decodeControl(s[n:])
		switch {
		case r == esc && n+1 < len(s) && s[n+1] == '\\':
			return n + 2
		case r == esc:
			return n
		case r == bel || r == can || r == sub || r == c1ST:
			return n + size
		}
		n += size
	}
	return len(s)
}
