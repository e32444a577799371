//go:build !unix && !windows

package operator

// lockProtect is a no-op where there is no flock: run one protect per
// manifest at a time.
func lockProtect(string) (func(), error) { return func() {}, nil }
