package operator

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/safefile"
)

// ProtectJournalName is the protect journal's file, beside the manifest.
const ProtectJournalName = "protect-journal.json"

// The protect journal records every encrypt before it is sent and its
// answer when it comes, so a rerun never repeats one that may have
// created a key. It holds t-Tags, IVs and ciphertexts, never plaintext.
type protectJournal struct {
	Version   int                    `json:"version"`
	Documents map[string]*protectRun `json:"documents"`
	path      string
}

type protectRun struct {
	SourceSHA256 string `json:"sourceSha256"`
	Owner        string `json:"owner"`
	// State is "encrypting" until the manifest lists the document, then
	// "done".
	State    string          `json:"state"`
	Attempts []*protectEntry `json:"attempts"`
}

// Attempt states.
const (
	attemptSent      = "sent"      // recorded before the request; no answer yet
	attemptEncrypted = "encrypted" // the answer is recorded
	attemptLost      = "lost"      // no answer came (connection lost, timeout)
	attemptFailed    = "failed"    // the Gateway or key server refused: nothing was done
	attemptAbandoned = "abandoned" // a lost attempt the operator gave up on
)

type protectEntry struct {
	Fragment   string    `json:"fragment"`
	DataType   string    `json:"dataType"`
	CreatesKey bool      `json:"createsKey"`
	State      string    `json:"state"`
	TTag       string    `json:"ttag,omitempty"`
	IV         string    `json:"iv"`
	Ciphertext string    `json:"ciphertext,omitempty"`
	At         time.Time `json:"at"`
	Detail     string    `json:"detail,omitempty"`
}

func loadProtectJournal(path string) (*protectJournal, error) {
	j := &protectJournal{Version: 1, Documents: map[string]*protectRun{}, path: path}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return j, nil
	}
	if err != nil {
		return nil, fmt.Errorf("protect journal: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("protect journal: %w", &safefile.ModeError{Path: path, Mode: fi.Mode(), Secret: true})
	}
	if err := json.Unmarshal(data, j); err != nil {
		return nil, fmt.Errorf("protect journal %s: %w", path, err)
	}
	if j.Version != 1 {
		return nil, fmt.Errorf("protect journal %s: version %d; this program reads 1", path, j.Version)
	}
	if j.Documents == nil {
		j.Documents = map[string]*protectRun{}
	}
	return j, nil
}

func (j *protectJournal) save() error {
	data, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	if err := grant.WriteFileAtomic(j.path, append(data, '\n')); err != nil {
		return fmt.Errorf("protect journal: %w", err)
	}
	return nil
}

// createdKeys maps each data type to the key an encrypt in any run created.
func (j *protectJournal) createdKeys() map[string]string {
	out := map[string]string{}
	for _, id := range slices.Sorted(maps.Keys(j.Documents)) {
		for _, a := range j.Documents[id].Attempts {
			if a.CreatesKey && a.State == attemptEncrypted {
				if _, ok := out[a.DataType]; !ok {
					out[a.DataType] = a.TTag
				}
			}
		}
	}
	return out
}

// latest is the newest attempt for a fragment, or nil.
func (r *protectRun) latest(fragment string) *protectEntry {
	for i := len(r.Attempts) - 1; i >= 0; i-- {
		if r.Attempts[i].Fragment == fragment {
			return r.Attempts[i]
		}
	}
	return nil
}
