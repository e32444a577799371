package grant

import (
	"errors"
	"syscall"
)

// errSharingViolation is ERROR_SHARING_VIOLATION, which package syscall
// does not name.
const errSharingViolation = syscall.Errno(32)

// renameRefusedInUse reports whether a rename failed because another
// process has the file open: MoveFileEx then says access denied, or a
// sharing violation.
func renameRefusedInUse(err error) bool {
	return errors.Is(err, syscall.ERROR_ACCESS_DENIED) || errors.Is(err, errSharingViolation)
}
