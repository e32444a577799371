//go:build !unix

package bench

import "time"

// cpuMeasured says whether cpuTime measures anything here: not on this
// system, so P1's CPU figures are left out.
const cpuMeasured = false

func cpuTime() time.Duration { return 0 }
