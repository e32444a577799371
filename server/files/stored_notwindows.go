//go:build !windows

package files

// storedName is the name dir stores for name: found by probing and, on a
// case-insensitive folder, by listing it (see probeStored).
func (r *Resolver) storedName(dir, name string) (string, error) { return r.probeStored(dir, name) }
