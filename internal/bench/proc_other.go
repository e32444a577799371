//go:build !linux

package bench

import (
	"errors"
	"time"
)

// procMeasured says whether procUsage measures anything here: not on this
// system (no /proc), so P7 reports the server's memory and descriptors as
// not measured.
const procMeasured = false

func procUsage(int) (int64, int, error) {
	return 0, 0, errors.New("the server's memory and descriptors are read from /proc, on Linux only")
}

func procCPU(int) (time.Duration, error) {
	return 0, errors.New("the server's CPU time is read from /proc, on Linux only")
}
