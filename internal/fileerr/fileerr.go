// Package fileerr words the refusals every operator file shares, whatever
// its format, so an empty file reads the same from every command.
package fileerr

import (
	"bytes"
	"errors"
	"fmt"
)

// ErrEmpty matches an [*EmptyError] with errors.Is.
var ErrEmpty = errors.New("empty file")

// EmptyError is a file with nothing in it (or only white space).
type EmptyError struct {
	Path string
	// Holds says what the file should hold, in words: "the task's grant
	// as a JSON object (pdmcp grant writes it)".
	Holds string
}

func (e *EmptyError) Error() string {
	return fmt.Sprintf("%s is empty: it should hold %s", e.Path, e.Holds)
}

// Is matches ErrEmpty.
func (e *EmptyError) Is(target error) bool { return target == ErrEmpty }

// CheckEmpty returns an [*EmptyError] when data holds nothing but white
// space, and nil otherwise.
func CheckEmpty(path string, data []byte, holds string) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return &EmptyError{Path: path, Holds: holds}
	}
	return nil
}
