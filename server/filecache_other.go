//go:build !linux && !darwin

package server

import (
	"errors"
	"os"
	"time"
)

// changeTime is unknown here: no file is kept (fileCache reads every time).
func changeTime(os.FileInfo) (time.Time, bool) { return time.Time{}, false }

// identOf is unknown here, so no folder is held.
func identOf(os.FileInfo) (fileIdent, bool) { return fileIdent{}, false }

// lstatAt is never reached here: no folder is held.
func lstatAt(int, string) (fileIdent, error) { return fileIdent{}, errors.ErrUnsupported }
