package devstack

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// SampleFile is the file pdmcp dev puts in its file root to try
// encrypt_file and decrypt_file on.
const SampleFile = "sample-notes.txt"

const sampleText = `Synthetic meeting notes for trying the file tools.

Attendees: alice, bob. Decision: the Cirrus proposal goes to a second round.
Nothing in this file is real.
`

// writeSample puts the sample file in the file root, once: a changed
// sample is left as it is.
func writeSample(root string) error {
	f, err := os.OpenFile(filepath.Join(root, SampleFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case errors.Is(err, fs.ErrExist):
		return nil
	case err != nil:
		return fmt.Errorf("the sample file: %w", err)
	}
	_, err = f.WriteString(sampleText)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
