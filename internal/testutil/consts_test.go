package testutil

import (
	"slices"
	"testing"
)

func TestStringConstsReadsOnlyTheNamedType(t *testing.T) {
	if got, want := StringConsts(t, "testdata/consts.go", "Code"), []string{"a", "b", "c", "e"}; !slices.Equal(got, want) {
		t.Errorf("StringConsts = %q, want %q", got, want)
	}
}
