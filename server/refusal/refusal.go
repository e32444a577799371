// Package refusal is the catalogue of the adapter's refusal codes: each
// code's one HTTP-like status and a one-line hint, and the Refusal type
// that the packages deciding them return. It is a leaf: it imports nothing
// of pdmcp, so server/files and server/handoff (and later server itself)
// can share it. The codes' tables in docs/ are checked against it.
//
// It holds the server's own codes (server names them as its Code
// constants), the file tools' (server/files) and the hand-off's
// (server/handoff).
package refusal

import (
	"fmt"
	"time"
)

// Code names one kind of refusal; its status and hint come from the
// catalogue.
type Code string

// The server's own codes (server; docs/operating.md, the section tools'
// also in docs/compound.md, the file tools' in docs/files.md). None of
// them sends anything to the Gateway.
const (
	ToolNotInGrant        Code = "TOOL_NOT_IN_GRANT"
	UnexpectedArgument    Code = "UNEXPECTED_ARGUMENT"
	MissingArgument       Code = "MISSING_ARGUMENT"
	InvalidArgument       Code = "INVALID_ARGUMENT"
	DocumentNotInGrant    Code = "DOCUMENT_NOT_IN_GRANT"
	UnknownDocument       Code = "UNKNOWN_DOCUMENT"
	DocumentNotApproved   Code = "DOCUMENT_NOT_APPROVED"
	DestinationNotInGrant Code = "DESTINATION_NOT_IN_GRANT"
	UnknownDestination    Code = "UNKNOWN_DESTINATION"
	DestinationHasNoKey   Code = "DESTINATION_HAS_NO_KEY"
	GrantExpired          Code = "GRANT_EXPIRED"
	ResultTooLarge        Code = "RESULT_TOO_LARGE"
	NotText               Code = "NOT_TEXT"
	IdempotencyConflict   Code = "IDEMPOTENCY_CONFLICT"
	IntegrityMismatch     Code = "INTEGRITY_MISMATCH"
	CiphertextUnavailable Code = "CIPHERTEXT_UNAVAILABLE"
	Internal              Code = "INTERNAL_ERROR"
	NotCompound           Code = "NOT_COMPOUND"
	UnknownFragment       Code = "UNKNOWN_FRAGMENT"
	InvalidFragmentText   Code = "INVALID_FRAGMENT_TEXT"
	EncryptAnswerLost     Code = "ENCRYPT_ANSWER_LOST"
	GrantTooWide          Code = "GRANT_TOO_WIDE"
	StorageUnavailable    Code = "STORAGE_UNAVAILABLE"
	// DestinationBusy: a save's cross-process lock stayed held by another
	// server past the bound (server.DefaultLockWait); nothing was sent.
	DestinationBusy Code = "DESTINATION_BUSY"
	// RecordUnavailable: the journal the server opened was removed or
	// replaced under it; saves are refused until the operator restarts
	// the server on a good one.
	RecordUnavailable Code = "RECORD_UNAVAILABLE"
)

// The file tools' codes (server/files; docs/files.md). Each is decided
// before anything is sent to the Gateway.
const (
	PathEmpty         Code = "PATH_EMPTY"
	PathForm          Code = "PATH_FORM_REFUSED"
	UNCOrDevice       Code = "UNC_OR_DEVICE_PATH"
	AlternateStream   Code = "ALTERNATE_STREAM"
	OutsideRoot       Code = "OUTSIDE_ROOT"
	NotFound          Code = "NOT_FOUND"
	Unresolvable      Code = "PATH_UNRESOLVABLE"
	IsADirectory      Code = "IS_A_DIRECTORY"
	NotRegular        Code = "NOT_A_REGULAR_FILE"
	HardLinked        Code = "HARD_LINKED"
	FileChanged       Code = "FILE_CHANGED"
	AlreadyAnEnvelope Code = "ALREADY_AN_ENVELOPE"
	NotAnEnvelope     Code = "NOT_AN_ENVELOPE"
	EmptyFile         Code = "EMPTY_FILE"
	FileTooLarge      Code = "FILE_TOO_LARGE"
	EnvelopeExists    Code = "ENVELOPE_EXISTS"
	KeyNotMintedHere  Code = "KEY_NOT_MINTED_HERE"
	NameTooLong       Code = "NAME_TOO_LONG"
	OutputNotWritable Code = "OUTPUT_NOT_WRITABLE"
	// FileBusy: encrypt_file's cross-process lock stayed held by another
	// server past the bound; nothing was sent.
	FileBusy Code = "FILE_BUSY"
)

// The hand-off's codes (server/handoff; docs/handoff.md).
const (
	StepNotInGrant          Code = "STEP_NOT_IN_GRANT"
	UnknownStep             Code = "UNKNOWN_STEP"
	ConfirmationUnavailable Code = "CONFIRMATION_UNAVAILABLE"
	ConfirmationDeclined    Code = "CONFIRMATION_DECLINED"
	NotStepDelegator        Code = "NOT_STEP_DELEGATOR"
	NothingToHandOff        Code = "NOTHING_TO_HAND_OFF"
	WindowTooShort          Code = "WINDOW_TOO_SHORT"
	RecipientHasEntry       Code = "RECIPIENT_HAS_ENTRY"
	HandOffNotVerified      Code = "HANDOFF_NOT_VERIFIED"
	StepNotOpen             Code = "STEP_NOT_OPEN"
	HandedOffReadOnly       Code = "HANDED_OFF_READ_ONLY"
	HandOffNotUndone        Code = "HANDOFF_NOT_UNDONE"
	HandOffBusy             Code = "HANDOFF_BUSY"
	TooManyConfirmations    Code = "TOO_MANY_CONFIRMATIONS"
)

// Entry is one code's line in the catalogue.
type Entry struct {
	Code   Code
	Status int
	// Hint is one line on what the caller can do about it.
	Hint string
	// Doc is the page under docs/ whose code table lists it.
	Doc string
}

// Catalogue returns every code this package knows: the server's, the
// file tools', the hand-off's. Each call returns a fresh slice.
func Catalogue() []Entry {
	const operating, files, handoff = "operating.md", "files.md", "handoff.md"
	return []Entry{
		{ToolNotInGrant, 403, "call only the tools the grant lists", operating},
		{UnexpectedArgument, 400, "send only the arguments the tool's input schema declares", operating},
		{MissingArgument, 400, "send every required argument", operating},
		{InvalidArgument, 400, "send arguments of the types and lengths the input schema declares", operating},
		{DocumentNotInGrant, 403, "use only the documents list_approved_documents names", operating},
		{UnknownDocument, 404, "the operator's manifest lacks the document; ask the operator", operating},
		{DocumentNotApproved, 403, "the operator withdrew the document; ask the operator", operating},
		{DestinationNotInGrant, 403, "save only to a destination the grant names", operating},
		{UnknownDestination, 404, "the operator's manifest lacks the destination; ask the operator", operating},
		{DestinationHasNoKey, 409, "the destination has no key yet; the operator must seed one", operating},
		{GrantExpired, 403, "the task's grant has ended; ask the operator for a new one", operating},
		{ResultTooLarge, 413, "read or save less at once (64 KiB at most)", operating},
		{NotText, 415, "only text documents can be read or saved", operating},
		{IdempotencyConflict, 409, "use a new idempotencyKey for other text", operating},
		{IntegrityMismatch, 502, "the stored document does not match its record; report it to the operator", operating},
		{CiphertextUnavailable, 500, "the stored ciphertext cannot be read; report it to the operator", operating},
		{Internal, 500, "the server failed; report it to the operator", operating},
		{StorageUnavailable, 503, "the server's record is busy or its disk is full; nothing was lost; try again shortly", operating},
		{NotCompound, 400, "use the section tools on a compound document only", operating},
		{UnknownFragment, 404, "name a section the document's view lists", operating},
		{InvalidFragmentText, 422, "keep the section's text within its own section's structure", operating},
		{EncryptAnswerLost, 502, "the earlier encrypt's answer was lost; it is never sent again; ask the operator", files},
		{GrantTooWide, 403, "the session would cover more than 64 keys; ask the operator", files},
		{DestinationBusy, 409, "another server holds this save's lock; nothing was sent; try again shortly", operating},
		{RecordUnavailable, 503, "the server's record was removed or replaced; nothing was sent; ask the operator to restart it", operating},

		{PathEmpty, 400, "name a file inside the task's folder", files},
		{PathForm, 400, "use a plain relative path with / or \\ separators", files},
		{UNCOrDevice, 400, "use a path inside the task's folder, not a share or a device", files},
		{AlternateStream, 400, "name the file itself, without a :stream suffix", files},
		{OutsideRoot, 403, "only files inside the task's folder can be used", files},
		{NotFound, 404, "list the folder and name a file that exists", files},
		{Unresolvable, 400, "the path could not be followed; name the file by another path", files},
		{IsADirectory, 400, "name a file, not a folder", files},
		{NotRegular, 400, "name a regular file, not a fifo, socket or device", files},
		{HardLinked, 403, "a file with more than one name is refused; ask the operator", files},
		{FileChanged, 409, "the file changed while it was used; try again", files},
		{AlreadyAnEnvelope, 400, "it is already encrypted; call decrypt_file to open it", files},
		{NotAnEnvelope, 400, "only a .pisoft envelope written by encrypt_file can be opened", files},
		{EmptyFile, 400, "an empty file has nothing to encrypt", files},
		{FileTooLarge, 413, "the file is over the Gateway's 16 MiB limit; split it", files},
		{EnvelopeExists, 409, "move or remove the existing envelope first", files},
		{KeyNotMintedHere, 403, "only envelopes encrypt_file made in this folder can be opened here", files},
		{NameTooLong, 400, "shorten the file's name", files},
		{OutputNotWritable, 400, "the folder takes no new file; ask the operator", files},
		{FileBusy, 409, "another server holds this file's encrypt lock; nothing was sent; try again shortly", files},

		{StepNotInGrant, 403, "hand off only a step the grant names", handoff},
		{UnknownStep, 404, "the operator's manifest lacks the step; do not retry", handoff},
		{ConfirmationUnavailable, 412, "use a host that can ask the user to confirm", handoff},
		{ConfirmationDeclined, 403, "the user said no; do not retry without asking them", handoff},
		{NotStepDelegator, 403, "only the step's from user can hand it off", handoff},
		{NothingToHandOff, 403, "none of the step's documents is in the grant", handoff},
		{WindowTooShort, 403, "the grant ends too soon for a hand-off", handoff},
		{RecipientHasEntry, 409, "close the recipient's other step first", handoff},
		{HandOffNotVerified, 502, "nothing stays granted; try again later", handoff},
		{StepNotOpen, 409, "this user has no open hand-off of that step", handoff},
		{HandedOffReadOnly, 403, "a handed section is read-only for the recipient", handoff},
		{HandOffNotUndone, 502, "an entry stays open; run close_step or pdmcp close-step", handoff},
		{HandOffBusy, 409, "another call holds the key and recipient; try again shortly", handoff},
		{TooManyConfirmations, 429, "answer the confirmations already asked, or wait for them to lapse", handoff},
	}
}

// Lookup is code's entry, and whether the catalogue has it.
func Lookup(code Code) (Entry, bool) {
	for _, e := range Catalogue() {
		if e.Code == code {
			return e, true
		}
	}
	return Entry{}, false
}

// Status is code's status; 500 for a code the catalogue lacks, which a
// test of every package that decides codes rules out.
func (c Code) Status() int {
	if e, ok := Lookup(c); ok {
		return e.Status
	}
	return 500
}

// Hint is code's one-line hint, or "" for a code the catalogue lacks.
func (c Code) Hint() string {
	e, _ := Lookup(c)
	return e.Hint
}

// Refusal is a "no" that a package below server decided: a code from the
// catalogue and a sentence for the model. The server renders it as an
// adapter-layer refusal with the code's status.
type Refusal struct {
	Code   Code
	Detail string
}

func (r *Refusal) Error() string { return fmt.Sprintf("%s: %s", r.Code, r.Detail) }

// Status is the status of the refusal's code.
func (r *Refusal) Status() int { return r.Code.Status() }

// New is a refusal with code and a detail formatted from format and args.
func New(code Code, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// The refusals several places make, made in one place so each reads the
// same wherever it is decided.

// GrantEnded is GRANT_EXPIRED for a call after the task's grant ended:
// at notAfter, or, when the caller does not know it (the zero time), just
// ended. nothingSent says that this call sent nothing to the Gateway; a
// call that already sent a request says nothing about it.
func GrantEnded(notAfter time.Time, nothingSent bool) *Refusal {
	when := "has ended"
	if !notAfter.IsZero() {
		when = "ended at " + notAfter.UTC().Format(time.RFC3339)
	}
	sent := ""
	if nothingSent {
		sent = "; nothing was sent"
	}
	return New(GrantExpired, "this task's grant %s%s; ask the operator for a new grant", when, sent)
}

// NoVerifiedCaller is INTERNAL_ERROR for an HTTP tool call that reached a
// tool without the verified caller the serving edge attaches to every
// request: a wiring fault, never the caller's doing.
func NoVerifiedCaller() *Refusal {
	return New(Internal, "no verified caller on this request")
}
