package grant

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// SeedRecord is what seed created: the agent's and the owner's users, every
// principal and key to remove at cleanup, and the manifest it wrote. The
// launcher reads AgentUser for all-approved; protect adds the keys it
// creates, so cleanup removes them too.
type SeedRecord struct {
	AgentUser  string   `json:"agentUser"`
	OwnerUser  string   `json:"ownerUser"`
	Principals []string `json:"principals"`
	Keys       []string `json:"keys"`
	Manifest   string   `json:"manifest"`
}

// LoadSeedRecord reads and checks the seed record at path. Like the grant,
// it is refused when group or others can write it: cleanup deletes the keys
// it lists.
func LoadSeedRecord(path string) (*SeedRecord, error) {
	r, _, err := loadChecked(seedHolds, path, maxSeedBytes, (*SeedRecord).Check)
	return r, err
}

// Save checks r and writes it to path atomically with mode 0600, under the
// record's lock. It replaces whatever the file holds: to change a record
// that protect or cleanup may write too, use [UpdateSeedRecord].
func (r *SeedRecord) Save(path string) error {
	return r.write(context.Background(), path, nil)
}

// CreateSeedRecord writes r as a new seed record at path, under the
// record's lock, as seed does before it creates anything. It refuses, with
// an error matching [fs.ErrExist], when a record is already there (another
// seed's, whose list of what to remove must not be lost), and refuses an
// invalid r; either way nothing is written.
func CreateSeedRecord(ctx context.Context, path string, r *SeedRecord) error {
	return r.write(ctx, path, absent)
}

// write checks r and writes it to path under the record's lock, refused by
// fresh (when not nil) as writeShared refuses.
func (r *SeedRecord) write(ctx context.Context, path string, fresh func(abs string) error) error {
	data, err := encodeChecked("seed record", path, r, r.Check)
	if err != nil {
		return err
	}
	abs, err := RealPath(path)
	if err != nil {
		return fmt.Errorf("seed record %s: %w", path, err)
	}
	return writeShared(ctx, "seed record", abs, data, fresh)
}

// Check refuses empty or repeated entries in Principals and Keys, and a
// user name with a space or control character.
func (r *SeedRecord) Check() error {
	for _, f := range []struct{ name, value string }{{"agentUser", r.AgentUser}, {"ownerUser", r.OwnerUser}} {
		if strings.ContainsFunc(f.value, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
			return fieldErr(f.name, ErrInvalid, "%q holds a space or control character", f.value)
		}
	}
	for _, list := range []struct {
		name   string
		values []string
	}{{"principals", r.Principals}, {"keys", r.Keys}} {
		for i, v := range list.values {
			field := fmt.Sprintf("%s[%d]", list.name, i)
			if v == "" {
				return &FieldError{Field: field, Err: ErrMissing}
			}
			// The value is not quoted: a key's t-Tag stays out of messages.
			if j := slices.Index(list.values, v); j != i {
				return fieldErr(field, ErrDuplicate, "same as %s[%d]", list.name, j)
			}
		}
	}
	return nil
}

// AddKeys records keys not already recorded, in order.
func (r *SeedRecord) AddKeys(keys ...string) {
	for _, k := range keys {
		if k != "" && !slices.Contains(r.Keys, k) {
			r.Keys = append(r.Keys, k)
		}
	}
}
