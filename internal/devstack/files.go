package devstack

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pdmcp/pdmcp/grant"
)

// SampleFile is the file pdmcp dev puts in its file root to try
// encrypt_file and decrypt_file on.
const SampleFile = "sample-notes.txt"

const sampleText = `Synthetic meeting notes for trying the file tools.

Attendees: alice, bob. Decision: the Cirrus proposal goes to a second round.
Nothing in this file is real.
`

// fileRoot makes the development task's folder, files/ in the state
// folder, with the sample file in it (written once; a changed sample is
// left as it is), and returns its resolved absolute path.
func fileRoot(state string) (string, error) {
	dir := filepath.Join(state, "files")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("the development file root: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return "", err
	}
	sample := filepath.Join(abs, SampleFile)
	f, err := os.OpenFile(sample, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case errors.Is(err, fs.ErrExist):
		return abs, nil
	case err != nil:
		return "", fmt.Errorf("the sample file: %w", err)
	}
	_, err = f.WriteString(sampleText)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return abs, err
}

// addFileTools gives the grant at path the file tools on root. pdmcp dev
// sets the root itself rather than through the launcher: its state folder
// usually sits inside the source checkout, which the launcher refuses for
// an operator's folder, and this folder holds only what pdmcp dev put there
// and what the file tools write.
func addFileTools(path, root string) error {
	g, err := grant.Load(path)
	if err != nil {
		return err
	}
	g.FileRoot = root
	for _, t := range grant.FileTools() {
		if !g.Allows(t) {
			g.AllowedTools = append(g.AllowedTools, t)
		}
	}
	return g.Save(path)
}
