// Package crashpoint names every step boundary at which pdmcp can be
// stopped by the crash-consistency tests: the saves, encrypt_file, the file
// tools' check, the hand-off and pdmcp protect. The code that runs a step
// calls its hook with one of these constants, never with a string of its
// own, so this file is the whole list; cmd/pdmcp's crash suite kills the
// process at each one (TestCrashPointsAllCovered). The hooks are nil in
// normal operation.
package crashpoint

// Point is one step boundary, "<operation>:<step just done>".
type Point string

// The steps of a whole-document save (server/saves.go, run by
// server/savepipe.go).
const (
	SaveReserved  Point = "save:reserved"
	SaveEncrypted Point = "save:encrypted" // the answer and the placement journalled
	SavePlaced    Point = "save:placed"    // placed again past a stray file
	// The version's sidecar (server/sidecar) is in place beside where its
	// file will be; the file is not written yet.
	SaveSidecarWritten Point = "save:sidecar-written"
	SaveFileCreated    Point = "save:file-created"
	SaveFileWritten    Point = "save:file-written"
	SaveLinked         Point = "save:linked"
	SaveCommitted      Point = "save:committed"
)

// The same steps of a section save (server/fragments.go).
const (
	FragmentReserved       Point = "fragment:reserved"
	FragmentEncrypted      Point = "fragment:encrypted"
	FragmentPlaced         Point = "fragment:placed"
	FragmentSidecarWritten Point = "fragment:sidecar-written"
	FragmentFileCreated    Point = "fragment:file-created"
	FragmentFileWritten    Point = "fragment:file-written"
	FragmentLinked         Point = "fragment:linked"
	FragmentCommitted      Point = "fragment:committed"
)

// The steps of encrypt_file (server/filetools.go), and the file tools'
// point between their path checks and their open.
const (
	EncryptFileReserved        Point = "encrypt_file:reserved"
	EncryptFileClaimed         Point = "encrypt_file:claimed"
	EncryptFileEncrypted       Point = "encrypt_file:encrypted"
	EncryptFileStaged          Point = "encrypt_file:staged"
	EncryptFileMinted          Point = "encrypt_file:minted"
	EncryptFileEnvelopeWritten Point = "encrypt_file:envelope-written"
	FileChecked                Point = "file:checked"
)

// The steps of a hand-off (server/handoff).
const (
	HandOffJournalled   Point = "handoff:journalled"
	HandOffGrantRefused Point = "handoff:grant-refused"
	HandOffGranted      Point = "handoff:granted"
	HandOffVerified     Point = "handoff:verified"
)

// The steps of pdmcp protect (internal/operator).
const (
	ProtectSent          Point = "protect:sent"
	ProtectEncrypted     Point = "protect:encrypted"
	ProtectFilesWritten  Point = "protect:files-written"
	ProtectManifestSaved Point = "protect:manifest-saved"
)

// All returns every point above, in the order of this file.
func All() []Point {
	return []Point{
		SaveReserved, SaveEncrypted, SavePlaced, SaveSidecarWritten, SaveFileCreated, SaveFileWritten, SaveLinked, SaveCommitted,
		FragmentReserved, FragmentEncrypted, FragmentPlaced, FragmentSidecarWritten, FragmentFileCreated, FragmentFileWritten, FragmentLinked,
		FragmentCommitted,
		EncryptFileReserved, EncryptFileClaimed, EncryptFileEncrypted, EncryptFileStaged, EncryptFileMinted, EncryptFileEnvelopeWritten,
		FileChecked,
		HandOffJournalled, HandOffGrantRefused, HandOffGranted, HandOffVerified,
		ProtectSent, ProtectEncrypted, ProtectFilesWritten, ProtectManifestSaved,
	}
}
