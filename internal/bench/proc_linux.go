//go:build linux

package bench

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procMeasured says whether procUsage measures anything here: /proc is
// read on Linux only.
const procMeasured = true

// procUsage is process pid's resident memory (VmRSS, bytes) and open
// descriptors, read from /proc.
func procUsage(pid int) (rss int64, fds int, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("VmRSS %q: %w", v, err)
		}
		rss = kb << 10
		break
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
	}
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, 0, err
	}
	return rss, len(entries), nil
}
