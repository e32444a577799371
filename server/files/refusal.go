package files

import "fmt"

// Codes for a path or file the file tools refuse. Each is an adapter
// refusal: nothing is sent to the Gateway.
const (
	CodePathEmpty         = "PATH_EMPTY"
	CodePathForm          = "PATH_FORM_REFUSED"
	CodeUNCOrDevice       = "UNC_OR_DEVICE_PATH"
	CodeAlternateStream   = "ALTERNATE_STREAM"
	CodeOutsideRoot       = "OUTSIDE_ROOT"
	CodeNotFound          = "NOT_FOUND"
	CodeUnresolvable      = "PATH_UNRESOLVABLE"
	CodeIsADirectory      = "IS_A_DIRECTORY"
	CodeNotRegular        = "NOT_A_REGULAR_FILE"
	CodeHardLinked        = "HARD_LINKED"
	CodeFileChanged       = "FILE_CHANGED"
	CodeAlreadyAnEnvelope = "ALREADY_AN_ENVELOPE"
	CodeNotAnEnvelope     = "NOT_AN_ENVELOPE"
	CodeEmptyFile         = "EMPTY_FILE"
	CodeFileTooLarge      = "FILE_TOO_LARGE"
	CodeEnvelopeExists    = "ENVELOPE_EXISTS"
	CodeKeyNotMintedHere  = "KEY_NOT_MINTED_HERE"
)

// Error is a refused path or file: a code from this package and a sentence
// for the model. The detail names only the path as given or relative to the
// root, never anything found outside it.
type Error struct {
	Code   string
	Detail string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Detail) }

// Status is the status a refusal with this code carries.
func (e *Error) Status() int {
	switch e.Code {
	case CodeOutsideRoot, CodeHardLinked, CodeKeyNotMintedHere:
		return 403
	case CodeNotFound:
		return 404
	case CodeFileChanged, CodeEnvelopeExists:
		return 409
	case CodeFileTooLarge:
		return 413
	}
	return 400
}

func refuse(code, format string, args ...any) *Error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, args...)}
}
