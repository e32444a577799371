//go:build !linux && !darwin

package server

import (
	"errors"
	"os"
)

// identOf is unknown here: no file is kept (fileCache reads every time),
// and no folder is held.
func identOf(os.FileInfo) (fileIdent, bool) { return fileIdent{}, false }

// lstatAt is never reached here: no folder is held.
func lstatAt(int, string) (fileIdent, error) { return fileIdent{}, errors.ErrUnsupported }
