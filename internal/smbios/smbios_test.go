package smbios

import (
	"bytes"
	"errors"
	"regexp"
	"testing"
)

var (
	serialRE = regexp.MustCompile(`^[A-Z0-9]{12}$`)
	boardRE  = regexp.MustCompile(`^[A-Z0-9]{17}$`)
	uuidRE   = regexp.MustCompile(`^[0-9A-F]{8}-[0-9A-F]{4}-4[0-9A-F]{3}-[89AB][0-9A-F]{3}-[0-9A-F]{12}$`)
)

func TestNewMatchesAppleFormatsAndTheCRDPatterns(t *testing.T) {
	for _, product := range []string{"iMacPro1,1", "MacPro7,1", "Macmini8,1"} {
		id, err := New(product, nil)
		if err != nil {
			t.Fatalf("New(%q): %v", product, err)
		}
		if !serialRE.MatchString(id.SerialNumber) || !boardRE.MatchString(id.BoardSerial) || !uuidRE.MatchString(id.UUID) {
			t.Errorf("New(%q) = %+v, not in Apple formats", product, id)
		}
	}
}

func TestNewUsesTheModelCodeOfKnownProducts(t *testing.T) {
	id, err := New("iMacPro1,1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := id.SerialNumber[8:]; got != "HX87" {
		t.Errorf("serial %s ends in %s, want the iMacPro1,1 model code HX87", id.SerialNumber, got)
	}
}

// TestBoardSerialsAndUUIDsDoNotCollide draws many identities: board serials
// (about 6e13 values) and UUIDs (122 random bits) must not repeat.
func TestBoardSerialsAndUUIDsDoNotCollide(t *testing.T) {
	seen := map[string]bool{}
	for range 2000 {
		id, err := New("iMacPro1,1", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{id.BoardSerial + "/b", id.UUID + "/u"} {
			if seen[v] {
				t.Fatalf("duplicate identity value %s", v)
			}
			seen[v] = true
		}
	}
}

// TestSerialSpaceKeepsFleetCollisionsRare: with 1,000 machines of one
// product the chance that two share a serial is n^2/2N, under 0.5%.
func TestSerialSpaceKeepsFleetCollisionsRare(t *testing.T) {
	const fleet = 1000.0
	if p := fleet * fleet / (2 * float64(SerialSpace())); p > 0.005 {
		t.Errorf("serial space %d gives a %.2f%% collision chance for %d machines", SerialSpace(), p*100, int(fleet))
	}
}

func TestNewIsDeterministicForAGivenRandomSource(t *testing.T) {
	seed := bytes.Repeat([]byte{7, 91, 200, 13}, 64)
	a, errA := New("iMacPro1,1", bytes.NewReader(seed))
	b, errB := New("iMacPro1,1", bytes.NewReader(seed))
	if errA != nil || errB != nil || a != b {
		t.Fatalf("same randomness gave %+v (%v) and %+v (%v)", a, errA, b, errB)
	}
}

func TestNewReportsAFailingRandomSource(t *testing.T) {
	if _, err := New("iMacPro1,1", errReader{}); err == nil {
		t.Fatal("New with a failing random source returned no error")
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("entropy exhausted") }
