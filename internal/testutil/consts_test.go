package testutil

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestStringConstsReadsOnlyTheNamedType(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.go")
	src := "package c\n\ntype Code string\n\nconst (\n\tA Code = \"a\"\n\tB, C Code = \"b\", \"c\"\n\tD = \"untyped\"\n)\n\nconst E Code = `e`\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := StringConsts(t, path, "Code"), []string{"a", "b", "c", "e"}; !slices.Equal(got, want) {
		t.Errorf("StringConsts = %q, want %q", got, want)
	}
}
