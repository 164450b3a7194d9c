package fakegithub

import (
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// jwtParts splits a compact JWT and decodes its header and claims.
func jwtParts(token string) (header, claims map[string]any, signed string, sig []byte, err error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, nil, "", nil, errors.New("not three dot-separated parts")
	}
	dec := func(s string, v any) error {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			return err
		}
		d := json.NewDecoder(strings.NewReader(string(b)))
		d.UseNumber()
		return d.Decode(v)
	}
	if err := dec(parts[0], &header); err != nil {
		return nil, nil, "", nil, fmt.Errorf("header: %w", err)
	}
	if err := dec(parts[1], &claims); err != nil {
		return nil, nil, "", nil, fmt.Errorf("claims: %w", err)
	}
	sig, err = base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return nil, nil, "", nil, fmt.Errorf("signature: %w", err)
	}
	return header, claims, parts[0] + "." + parts[1], sig, nil
}

// verifyRS256 checks an RS256 signature over signed.
func verifyRS256(signed string, sig []byte, key *rsa.PublicKey) error {
	sum := sha256.Sum256([]byte(signed))
	return rsa.VerifyPKCS1v15(key, crypto.SHA256, sum[:], sig)
}

// signHS256 makes a compact HS256 JWT of claims.
func signHS256(claims map[string]any, key []byte) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signed := enc(map[string]string{"alg": "HS256", "typ": "JWT"}) + "." + enc(claims)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(signed))
	return signed + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// verifyHS256 checks an HS256 JWT made by signHS256 and returns its claims.
func verifyHS256(token string, key []byte) (map[string]any, error) {
	header, claims, signed, sig, err := jwtParts(token)
	if err != nil {
		return nil, err
	}
	if header["alg"] != "HS256" {
		return nil, errors.New("not HS256")
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(signed))
	if !hmac.Equal(m.Sum(nil), sig) {
		return nil, errors.New("bad signature")
	}
	return claims, nil
}

// claimString reads a claim that may be a string or a number.
func claimString(claims map[string]any, name string) string {
	switch v := claims[name].(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	default:
		return ""
	}
}

// claimInt reads a numeric claim (NumericDate), reporting whether it was
// one.
func claimInt(claims map[string]any, name string) (int64, bool) {
	switch v := claims[name].(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i, true
		}
		if f, err := v.Float64(); err == nil {
			return int64(f), true
		}
	case string:
		if i, err := strconv.ParseInt(v, 10, 64); err == nil {
			return i, true
		}
	}
	return 0, false
}

const alphanumeric = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// randomString returns n characters drawn from alphabet.
func randomString(n int, alphabet string) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// newUUID returns a random (version 4) UUID in its text form.
func newUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
