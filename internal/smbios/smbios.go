// Package smbios generates the per-machine SMBIOS identity macOS sees: a
// system serial number and a logic board serial in Apple's formats, and a
// system UUID. It is generated once per machine and then never changes, so
// macOS keeps its activation and iCloud-free device identity across reboots.
package smbios

import (
	"crypto/rand"
	"fmt"
	"io"
	"math/big"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// Alphabets of Apple's serial number fields (no I or O, which read as 1 and 0).
const (
	serialAlphabet = "0123456789ABCDEFGHJKLMNPQRSTUVWXYZ"
	// yearAlphabet encodes the manufacturing year and half-year.
	yearAlphabet = "CDFGHJKLMNPQRSTVWXYZ"
	// weekAlphabet encodes the week within the half-year.
	weekAlphabet = "123456789CDFGHJKLMNPQRTVWXY"
)

// locations are factory codes Apple uses as a serial's first three characters.
var locations = []string{"C02", "C07", "C17", "D25", "F5K", "W80"}

// modelCodes are the last four serial characters Apple uses for the models
// macOS virtual machines commonly present as.
var modelCodes = map[string]string{
	"iMacPro1,1": "HX87",
	"MacPro7,1":  "P7QM",
	"iMac19,1":   "JV3Q",
}

// New returns a fresh identity for a machine presenting as productName,
// reading randomness from r (crypto/rand.Reader when nil).
func New(productName string, r io.Reader) (macvirtv1alpha1.MachineSMBIOS, error) {
	if r == nil {
		r = rand.Reader
	}
	g := &gen{r: r}
	model, ok := modelCodes[productName]
	if !ok {
		model = g.pick(serialAlphabet, 4)
	}
	location := locations[g.index(len(locations))]
	serial := location + g.pick(yearAlphabet, 1) + g.pick(weekAlphabet, 1) + g.pick(serialAlphabet, 3) + model
	board := location + g.pick("0123456789", 3) + g.pick(serialAlphabet, 5) + model + g.pick(serialAlphabet, 2)
	uuid := g.uuid()
	if g.err != nil {
		return macvirtv1alpha1.MachineSMBIOS{}, fmt.Errorf("generating SMBIOS identity: %w", g.err)
	}
	return macvirtv1alpha1.MachineSMBIOS{SerialNumber: serial, BoardSerial: board, UUID: uuid}, nil
}

// gen draws characters and bytes from r, remembering the first error.
type gen struct {
	r   io.Reader
	err error
}

func (g *gen) pick(alphabet string, n int) string {
	out := make([]byte, n)
	max := big.NewInt(int64(len(alphabet)))
	for i := range out {
		if g.err != nil {
			out[i] = alphabet[0]
			continue
		}
		v, err := rand.Int(g.r, max)
		if err != nil {
			g.err = err
			out[i] = alphabet[0]
			continue
		}
		out[i] = alphabet[v.Int64()]
	}
	return string(out)
}

// index returns a random index below n.
func (g *gen) index(n int) int {
	if g.err != nil {
		return 0
	}
	v, err := rand.Int(g.r, big.NewInt(int64(n)))
	if err != nil {
		g.err = err
		return 0
	}
	return int(v.Int64())
}

// SerialSpace is the number of distinct serial numbers New draws from for
// one product: serials are short, so uniqueness across a fleet is
// probabilistic and checked at admission.
func SerialSpace() int {
	return len(locations) * len(yearAlphabet) * len(weekAlphabet) * len(serialAlphabet) * len(serialAlphabet) * len(serialAlphabet)
}

// uuid returns an RFC 4122 version 4 UUID in upper case, as macOS prints it.
func (g *gen) uuid() string {
	var b [16]byte
	if g.err == nil {
		if _, err := io.ReadFull(g.r, b[:]); err != nil {
			g.err = err
		}
	}
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	return fmt.Sprintf("%X-%X-%X-%X-%X", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
