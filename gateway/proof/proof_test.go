package proof

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/pdmcp/pdmcp/internal/testutil"
)

const testURL = "https://127.0.0.1:8443/api/v1/crypto/decrypt"

func TestVerifyAcceptsOwnProof(t *testing.T) {
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	p, err := k.Make("POST", testURL+"?ignored=1", "handle-1", now)
	if err != nil {
		t.Fatal(err)
	}
	v, err := Verify(p, "POST", testURL, "handle-1", now.Add(30*time.Second), time.Minute)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if v.JKT != k.JKT() {
		t.Errorf("jkt %q, want %q", v.JKT, k.JKT())
	}
	if v.Claims.ATH != ATH("handle-1") || v.Claims.HTM != "POST" || v.Claims.JTI == "" {
		t.Errorf("claims %+v", v.Claims)
	}
	p2, _ := k.Make("POST", testURL, "handle-1", now)
	v2, err := Verify(p2, "POST", testURL, "handle-1", now, time.Minute)
	if err != nil || v2.Claims.JTI == v.Claims.JTI {
		t.Errorf("second proof must verify with a fresh jti: err=%v", err)
	}
}

func TestVerifyRefusals(t *testing.T) {
	k, _ := NewKey()
	other, _ := NewKey()
	now := time.Unix(1_800_000_000, 0)
	good, _ := k.Make("POST", testURL, "h", now)
	forged, _ := other.Make("POST", testURL, "h", now)
	// Swap the signature of another key onto this proof's header and claims.
	parts := strings.Split(good, ".")
	oparts := strings.Split(forged, ".")
	badSig := parts[0] + "." + parts[1] + "." + oparts[2]

	tests := []struct {
		name   string
		token  string
		method string
		url    string
		handle string
		at     time.Time
		want   error
	}{
		{"empty", "", "POST", testURL, "h", now, ErrMissing},
		{"garbage", "not-a-jws", "POST", testURL, "h", now, ErrInvalid},
		{"bad signature", badSig, "POST", testURL, "h", now, ErrInvalid},
		{"wrong method", good, "GET", testURL, "h", now, ErrInvalid},
		{"wrong url", good, "POST", "https://127.0.0.1:8443/api/v1/crypto/encrypt", "h", now, ErrInvalid},
		{"wrong handle", good, "POST", testURL, "other", now, ErrInvalid},
		{"stale", good, "POST", testURL, "h", now.Add(61 * time.Second), ErrStale},
		{"from the future", good, "POST", testURL, "h", now.Add(-61 * time.Second), ErrStale},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tc.token, tc.method, tc.url, tc.handle, tc.at, time.Minute)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestDestroyedKeyCannotSign(t *testing.T) {
	k, _ := NewKey()
	k.Destroy()
	if _, err := k.Make("POST", testURL, "h", time.Now()); err == nil {
		t.Fatal("a destroyed key signed a proof")
	}
}

func TestAssertionRoundTrip(t *testing.T) {
	priv := testutil.NewKey(t)
	c := testutil.SelfSigned(t, &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "svc"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}, priv)
	now := time.Unix(1_800_000_000, 0)
	login := "https://127.0.0.1:9/api/v1/auth/service"
	a, err := MakeAssertion(priv, c, login, now)
	if err != nil {
		t.Fatal(err)
	}
	v, err := VerifyAssertion(a, login, now, time.Minute)
	if err != nil {
		t.Fatalf("VerifyAssertion: %v", err)
	}
	if CertFingerprint(v.Certificate) != CertFingerprint(c) {
		t.Error("certificate not carried")
	}
	if _, err := VerifyAssertion(a, "https://127.0.0.2:9/api/v1/auth/service", now, time.Minute); !errors.Is(err, ErrInvalid) {
		t.Errorf("other audience: %v", err)
	}
	if _, err := VerifyAssertion(a, login, now.Add(5*time.Minute), time.Minute); !errors.Is(err, ErrStale) {
		t.Errorf("late assertion: %v", err)
	}
}
