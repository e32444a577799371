package grant

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestSeedRecordRoundTrip(t *testing.T) {
	r, err := LoadSeedRecord(copyFixture(t, "seed-record-valid.json", "seed-record.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r.AgentUser != "svc.agent" || r.OwnerUser != "svc.owner" || len(r.Principals) != 2 || len(r.Keys) != 2 {
		t.Fatalf("LoadSeedRecord = %+v", r)
	}
	r.AddKeys("dGFnLWF1cm9yYQ", "new-key", "", "new-key")
	if want := []string{"dGFnLWF1cm9yYQ", "dGFnLXN1bW1hcnk", "new-key"}; !reflect.DeepEqual(r.Keys, want) {
		t.Fatalf("AddKeys gave %v, want %v", r.Keys, want)
	}
	assertSavesOverLoose(t, filepath.Join(t.TempDir(), "record.json"), r.Save, LoadSeedRecord, r)
}

func TestSeedRecordRefusals(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name  string
		write func(path string)
		want  error
		field string
	}{
		{"unknown field", func(p string) { writeJSON(t, p, map[string]any{"agentUser": "a", "password": "x"}) }, ErrUnknownField, ""},
		{"empty key", func(p string) { writeJSON(t, p, map[string]any{"keys": []string{"k", ""}}) }, ErrMissing, "keys[1]"},
		{"repeated principal", func(p string) { writeJSON(t, p, map[string]any{"principals": []string{"a", "a"}}) }, ErrDuplicate, "principals[1]"},
		{"agent user with a space", func(p string) { writeJSON(t, p, map[string]any{"agentUser": "svc agent"}) }, ErrInvalid, "agentUser"},
		{"writable by others", func(p string) {
			writeJSON(t, p, map[string]any{"agentUser": "a"})
			if err := os.Chmod(p, 0o646); err != nil {
				t.Fatal(err)
			}
		}, ErrInsecureMode, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name+".json")
			tt.write(path)
			r, err := LoadSeedRecord(path)
			if r != nil {
				t.Fatalf("LoadSeedRecord returned a record with error %v", err)
			}
			assertRefused(t, err, tt.want, tt.field)
		})
	}
	// Save refuses what Load refuses, and writes nothing.
	out := filepath.Join(dir, "out.json")
	bad := &SeedRecord{Keys: []string{"k", "k"}}
	if err := bad.Save(out); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("Save of a repeated key: %v", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a refused Save wrote a file")
	}
}
