package files

import "github.com/pdmcp/pdmcp/server/refusal"

// Error is a refused path or file: a code from the catalogue and a sentence
// for the model; its Status is the code's. The detail names only the path
// as given or relative to the root, never anything found outside it.
type Error = refusal.Refusal

func refuse(code refusal.Code, format string, args ...any) *Error {
	return refusal.New(code, format, args...)
}
