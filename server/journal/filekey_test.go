package journal

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// TestFileKeyStringNamesTheCallerByDigest: a file key reaches the error log
// through the journal's errors; it names the caller as the digest the
// server logs callers by, never as issuer|subject.
func TestFileKeyStringNamesTheCallerByDigest(t *testing.T) {
	id := "https://idp.example/realms/r|alice-subject"
	sum := sha256.Sum256([]byte(id))
	digest := hex.EncodeToString(sum[:6])
	k := FileKey{Caller: id, Root: "/data", RelPath: "a.txt", ContentSHA256: strings.Repeat("a", 64)}
	j, _ := openTemp(t)
	_, err := j.GetFile(t.Context(), k)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetFile of an unknown key: %v, want not found", err)
	}
	for _, s := range []string{k.String(), err.Error()} {
		if strings.Contains(s, "alice-subject") || strings.Contains(s, "idp.example") {
			t.Errorf("%q names the caller in clear", s)
		}
		if !strings.Contains(s, digest) {
			t.Errorf("%q does not name the caller's digest %s", s, digest)
		}
	}
	if s := (FileKey{Root: "/data", RelPath: "a.txt"}).String(); !strings.Contains(s, "caller ,") {
		t.Errorf("stdio key %q", s)
	}
}
