package grant

import (
	"errors"
	"fmt"

	"github.com/pdmcp/pdmcp/internal/fileerr"
	"github.com/pdmcp/pdmcp/internal/safefile"
	"github.com/pdmcp/pdmcp/internal/strictjson"
)

// CodeGrantTooWide is the refusal code for a grant whose documents and
// destinations cover more keys than one scoped session may hold.
const CodeGrantTooWide = "GRANT_TOO_WIDE"

// Errors of reading and checking the files. Match them with errors.Is; most
// arrive inside a [*FieldError] that names where in the file the problem is.
var (
	// The file's own refusals: those of every operator file
	// (internal/strictjson, internal/safefile), so one errors.Is matches
	// them whichever package read the file.
	ErrEmpty        = fileerr.ErrEmpty
	ErrMalformed    = strictjson.ErrMalformed
	ErrUnknownField = strictjson.ErrUnknownField
	ErrDuplicateKey = strictjson.ErrDuplicateKey
	ErrTooLarge     = safefile.ErrTooLarge
	ErrNotRegular   = safefile.ErrNotRegular
	ErrInsecureMode = safefile.ErrGroupWritable

	ErrMissing   = errors.New("required but missing")
	ErrInvalid   = errors.New("invalid value")
	ErrBadID     = errors.New("not a safe id (1-128 of letters, digits, '-', '_', '.', starting with a letter or digit)")
	ErrBadIV     = errors.New("not an IV (base64 of 16 bytes)")
	ErrBadSHA256 = errors.New("not a sha256 (64 hex digits)")
	ErrBadPath   = errors.New("bad path")
	ErrDuplicate = errors.New("named twice")

	ErrUnknownDocument    = errors.New("no such document in the manifest")
	ErrUnknownDestination = errors.New("no such destination in the manifest")
	ErrUnknownStep        = errors.New("no such step in the manifest")
	ErrUnknownDataType    = errors.New("unknown data type")
	ErrNotCompound        = errors.New("not a compound document")

	ErrNoTools          = errors.New("allowedTools is empty")
	ErrUnknownTool      = errors.New("unknown tool")
	ErrIdentity         = errors.New("exactly one of localUser and callerIdentity must be set")
	ErrStepsRequired    = errors.New("hand_off and close_step need steps")
	ErrFileRootRequired = errors.New("encrypt_file and decrypt_file need a file root")
	ErrManifestMismatch = errors.New("grant was written for another manifest")
	ErrNoKeys           = errors.New("grant covers no key, and a scoped session needs at least one")
	// ErrNothingGranted: a grant that names no document, no destination
	// and no file root: nothing for any tool to do.
	ErrNothingGranted    = errors.New("grant names nothing")
	ErrGrantTooWide      = errors.New(CodeGrantTooWide)
	ErrNotApproved       = errors.New("document is not approved in the manifest")
	ErrBadOption         = errors.New("bad launch option")
	ErrNoManifestLocated = errors.New("manifest has no location yet: load or save it first")
)

// File-root refusals of the launcher, each inside a [*FileRootError].
var (
	ErrRootMissing        = errors.New("file root does not exist")
	ErrRootNotDir         = errors.New("file root is not a folder")
	ErrRootFilesystemRoot = errors.New("file root is a filesystem root")
	ErrRootHome           = errors.New("file root is a home directory itself")
	ErrRootCheckout       = errors.New("file root is a source checkout")
	ErrRootHoldsCheckout  = errors.New("file root holds a source checkout")
	ErrRootInsideCheckout = errors.New("file root is inside a source checkout")
	ErrRootTooLarge       = errors.New("file root holds too many entries to check")
	ErrRootUnreadable     = errors.New("file root could not be checked")
)

// FieldError says which field of a file is wrong and how. Field is a path
// into the JSON, such as documents["ccd-0001"].fragments[2].iv.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// fieldErr builds a FieldError whose error wraps sentinel with detail.
func fieldErr(field string, sentinel error, format string, args ...any) *FieldError {
	if format == "" {
		return &FieldError{Field: field, Err: sentinel}
	}
	return &FieldError{Field: field, Err: fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))}
}

// ModeError refuses a file that group or others can write: anyone who can
// write it can widen what the task may reach. It is internal/safefile's, so
// a mode reads the same from every command; errors.Is(err,
// ErrInsecureMode) matches it.
type ModeError = safefile.ModeError

// GrantTooWideError is GRANT_TOO_WIDE: the grant covers Count distinct keys
// and a scoped session may cover at most Max.
type GrantTooWideError struct {
	Count int
	Max   int
}

func (e *GrantTooWideError) Error() string {
	return fmt.Sprintf("%s: the grant's documents and destinations cover %d distinct keys, more than the %d one scoped session may hold; split the task",
		CodeGrantTooWide, e.Count, e.Max)
}

// Is makes errors.Is(err, ErrGrantTooWide) true.
func (e *GrantTooWideError) Is(target error) bool { return target == ErrGrantTooWide }

// FileRootError refuses a folder as a task's file root. Err is one of the
// ErrRoot* errors; Found names what was found (a checkout marker, the home
// it equals), if anything.
type FileRootError struct {
	Root  string
	Found string
	Err   error
}

func (e *FileRootError) Error() string {
	s := fmt.Sprintf("%v: %s", e.Err, e.Root)
	if e.Found != "" {
		s += " (" + e.Found + ")"
	}
	return s + "; choose a folder made for this task"
}

func (e *FileRootError) Unwrap() error { return e.Err }
