package files

import (
	"path/filepath"

	"golang.org/x/sys/windows"
)

// storedName is the name dir stores for name, as FindFirstFile reports it:
// the long name (a short 8.3 name such as REPORT~1.PIS expanded) in the
// case it was created with.
func (r *Resolver) storedName(dir, name string) (string, error) {
	p, err := windows.UTF16PtrFromString(filepath.Join(dir, name))
	if err != nil {
		return "", err
	}
	var data windows.Win32finddata
	h, err := windows.FindFirstFile(p, &data)
	if err != nil {
		return "", err
	}
	windows.FindClose(h)
	return windows.UTF16ToString(data.FileName[:]), nil
}
