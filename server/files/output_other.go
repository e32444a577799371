//go:build !linux && !darwin && !windows

package files

import (
	"errors"
	"os"
)

// nameMax: 255, the limit of every filesystem these systems commonly use.
func nameMax(string) int { return 255 }

// renameNoReplace has no atomic form reachable here: the tools place files
// by hard link only.
func renameNoReplace(*os.Root, string, string) error { return errors.ErrUnsupported }
