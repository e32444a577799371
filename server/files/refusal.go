package files

import "github.com/pdmcp/pdmcp/server/refusal"

// Codes for a path or file the file tools refuse: the catalogue's (package
// refusal, which holds each one's status). Each is an adapter refusal:
// nothing is sent to the Gateway.
const (
	CodePathEmpty         = refusal.PathEmpty
	CodePathForm          = refusal.PathForm
	CodeUNCOrDevice       = refusal.UNCOrDevice
	CodeAlternateStream   = refusal.AlternateStream
	CodeOutsideRoot       = refusal.OutsideRoot
	CodeNotFound          = refusal.NotFound
	CodeUnresolvable      = refusal.Unresolvable
	CodeIsADirectory      = refusal.IsADirectory
	CodeNotRegular        = refusal.NotRegular
	CodeHardLinked        = refusal.HardLinked
	CodeFileChanged       = refusal.FileChanged
	CodeAlreadyAnEnvelope = refusal.AlreadyAnEnvelope
	CodeNotAnEnvelope     = refusal.NotAnEnvelope
	CodeEmptyFile         = refusal.EmptyFile
	CodeFileTooLarge      = refusal.FileTooLarge
	CodeEnvelopeExists    = refusal.EnvelopeExists
	CodeKeyNotMintedHere  = refusal.KeyNotMintedHere
)

// Error is a refused path or file: a code from the catalogue and a sentence
// for the model; its Status is the code's. The detail names only the path
// as given or relative to the root, never anything found outside it.
type Error = refusal.Refusal

func refuse(code refusal.Code, format string, args ...any) *Error {
	return refusal.New(code, format, args...)
}
