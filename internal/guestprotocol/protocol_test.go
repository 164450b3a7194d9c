package guestprotocol_test

import (
	"testing"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// The recorded hash is plain hex SHA-256 of the token as the config disk
// holds it, so both sides (and a human with sha256sum) agree on it.
func TestHashTokenIsHexSHA256(t *testing.T) {
	const token, want = "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	if got := guestprotocol.HashToken(token); got != want {
		t.Fatalf("HashToken(%q) = %s, want %s", token, got, want)
	}
}
