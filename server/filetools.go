package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/crashpoint"
	"github.com/pdmcp/pdmcp/server/files"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// maxDecryptedNames bounds the -2, -3, ... names tried for an output.
const maxDecryptedNames = 1000

// fileInput is the file tools' one argument.
type fileInput struct {
	Path string `json:"path" jsonschema:"a file in the task's folder: relative to it, or absolute"`
}

// encryptFileResult is what encrypt_file returns.
type encryptFileResult struct {
	Envelope  string `json:"envelope" jsonschema:"the .pisoft written, relative to the task's folder; pass it to decrypt_file to get the file back"`
	Path      string `json:"path" jsonschema:"the file that was encrypted, relative to the task's folder; it is left as it was"`
	Bytes     int64  `json:"bytes" jsonschema:"the size of the encrypted file in bytes"`
	SHA256    string `json:"sha256" jsonschema:"the hex sha256 of the file's content, which decrypt_file checks"`
	Replayed  bool   `json:"replayed" jsonschema:"true when this content was already encrypted here: this is the first result and no key was created"`
	Rewritten bool   `json:"rewritten" jsonschema:"true when the envelope was missing and was written again from the server's record"`
}

func (s *Server) encryptFileTool() tool {
	return newTool(s, mcp.Tool{
		Name:  grant.ToolEncryptFile,
		Title: "Encrypt a file in the task's folder",
		Description: description{
			does: "Encrypts one regular file in the task's folder under a new key the key server creates for it, and " +
				"writes <name>.pisoft beside it; the original stays. Returns the envelope's path and the original's " +
				"size and sha256.",
			use: "to protect a file in the task's folder; path is relative to the folder or absolute. Calling again " +
				"with the same content returns the first result and creates no second key; a deleted envelope is " +
				"written again. To get the file back later, call decrypt_file on the .pisoft.",
			refuses: "anything outside the folder, a link out of it, a folder, a device, a file with a second name, an " +
				"empty file, a .pisoft, a file over 16,777,215 bytes, and a name too long for its envelope beside it " +
				"(NAME_TOO_LONG), before anything is sent.",
			never: "overwrites an existing .pisoft, and never returns the content or the key.",
		}.String(),
		Annotations: writes(true, false),
	}, s.encryptFile)
}

func (s *Server) decryptFileTool() tool {
	return newTool(s, mcp.Tool{
		Name:  grant.ToolDecryptFile,
		Title: "Decrypt a .pisoft in the task's folder",
		Description: description{
			does: "Decrypts one .pisoft that encrypt_file wrote in this task's folder and writes the plaintext beside " +
				"it as <name>.decrypted<ext> (then -2, -3, ... if taken). Returns that file's path, size and sha256.",
			use: "to get a file back from its envelope; read the written file if the task needs its content. Calling " +
				"again while the first copy is still there unchanged returns that copy (replayed) and writes no second one.",
			refuses: "an envelope whose key encrypt_file did not create in this folder, and a plaintext whose sha256 is " +
				"not the one recorded at encryption. The key server decides whether this task's user may use the key.",
			never: "overwrites a file, and never returns the content.",
		}.String(),
		Annotations: writes(false, false),
	}, s.decryptFile)
}

// openFile opens a file tool's path in the task's folder, refused as
// package files decides (nothing sent), and names it in the audit line;
// dir and name split its path relative to the folder.
func (s *Server) openFile(c *call, p string) (f *files.File, dir, name string, err error) {
	if f, err = s.files.Open(p); err != nil {
		return nil, "", "", fileRefusal(err)
	}
	c.line.Path = f.Rel
	dir, name = path.Split(f.Rel)
	return f, dir, name, nil
}

// fileRefusal turns a path or file refusal into the adapter's refusal.
func fileRefusal(err error) error {
	var fe *files.Error
	if errors.As(err, &fe) {
		return refuseCode(fe.Code, "%s; nothing was sent", fe.Detail)
	}
	return err
}

// encryptFile encrypts one file under a new key into its envelope beside
// it. The steps: open and read the file (every refusal here sends
// nothing), reserve the journal row under the file's lock (a row past
// reserved is replayed), check the envelope's place, take a session and
// claim the send, encrypt, record the new key, write the envelope, and
// mark the row done. The crash points sit between the steps.
func (s *Server) encryptFile(ctx context.Context, c *call, in fileInput) (encryptFileResult, error) {
	var zero encryptFileResult
	f, dir, name, err := s.openFile(c, in.Path)
	if err != nil {
		return zero, err
	}
	defer f.Close()
	data, err := readToEncrypt(f, name)
	if err != nil {
		return zero, err
	}
	size := f.Size()
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	c.line.PlaintextSHA256 = sha
	envRel := dir + name + files.EnvelopeExt
	key := journal.FileKey{Caller: c.caller.ID, Root: s.files.Root(), RelPath: f.Rel, ContentSHA256: sha}
	out := encryptFileResult{Envelope: envRel, Path: f.Rel, Bytes: size, SHA256: sha}

	if err := s.checkJournal(); err != nil {
		return zero, err
	}
	// The cross-process lock first, then the in-process one: no lock of
	// this process is held while waiting for another process.
	release, err := s.lockEncrypt(ctx, key)
	if err != nil {
		return zero, err
	}
	defer release()
	unlock, err := s.fileLocks.lock(ctx, key.String())
	if err != nil {
		return zero, err
	}
	defer unlock()
	_, statErr := f.Dir.Lstat(filepath.FromSlash(envRel))
	envExists := statErr == nil
	row, err := s.cfg.Journal.ReserveFile(ctx, key)
	if err != nil {
		return zero, fmt.Errorf("reserve file: %w", err)
	}
	if !row.New && row.State != journal.FileReserved {
		return s.replayEncrypt(ctx, c, f.Dir, row, out)
	}
	// A new row, or one reserved by a call that stopped before sending.
	placer, err := s.placeEnvelope(ctx, f, key, envRel, envExists)
	if err != nil {
		return zero, err
	}
	s.cfg.CrashPoint(crashpoint.EncryptFileReserved)
	sess, iv, err := s.encryptSession(ctx, c, key)
	if err != nil {
		return zero, err
	}
	// From here the row says "sent": if this call dies before the answer
	// is recorded, no retry sends it again.
	claimed, row, err := s.cfg.Journal.ClaimSend(ctx, key)
	if err != nil {
		return zero, fmt.Errorf("claim the encrypt: %w", err)
	}
	if !claimed {
		// Another process claimed it meanwhile.
		return s.replayEncrypt(ctx, c, f.Dir, row, out)
	}
	s.cfg.CrashPoint(crashpoint.EncryptFileClaimed)
	// The plaintext goes into the request and is dropped here, so the
	// collector may free it while the answer is read.
	req := gateway.EncryptInput{IV: iv, Plaintext: data}
	data = nil
	enc, err := s.sendEncrypt(ctx, c, key, f.Rel, sess, req)
	if err != nil {
		return zero, err
	}
	s.cfg.CrashPoint(crashpoint.EncryptFileEncrypted)
	// The envelope is written under its staged name while the ciphertext
	// is stored: the call's two large writes, each mostly hashing, encoding
	// or waiting on its own fsync, run at once. The envelope takes its
	// name only once the journal holds the key.
	mintedAt := s.cfg.Now()
	staged := s.stageInBackground(placer, envRel, key, files.Envelope{CreatedAt: mintedAt, TTag: enc.TTag, IV: enc.IV,
		Ciphertext: enc.Ciphertext, Name: name, Bytes: size, SHA256: key.ContentSHA256})
	minted := s.storeCiphertext(key, enc, mintedAt)
	st := <-staged
	defer st.discard()
	s.cfg.CrashPoint(crashpoint.EncryptFileStaged)
	row, err = s.recordMinted(ctx, key, minted, enc.Ciphertext)
	if err != nil {
		return zero, err
	}
	enc = nil
	s.cfg.CrashPoint(crashpoint.EncryptFileMinted)
	if err := s.placeStaged(f.Dir, envRel, name, size, row, placer, st); err != nil {
		return zero, err
	}
	s.cfg.CrashPoint(crashpoint.EncryptFileEnvelopeWritten)
	if _, err := s.cfg.Journal.MarkFileDone(context.WithoutCancel(ctx), key); err != nil {
		return zero, fmt.Errorf("mark file done: %w", err)
	}
	return out, nil
}

// readToEncrypt checks the opened file (named name) can be encrypted and
// reads it whole: not an envelope, every name this tool and decrypt_file
// will create beside it fits, not empty, within the Gateway's limit, and
// unchanged while read. Each refusal sends nothing.
func readToEncrypt(f *files.File, name string) ([]byte, error) {
	if files.IsEnvelopeName(name) {
		return nil, refuseCode(refusal.AlreadyAnEnvelope,
			"%q is already an envelope; nothing was sent; to open it call decrypt_file", f.Rel)
	}
	// Every name this tool and decrypt_file will create beside the file
	// must fit the filesystem, or a key would be made for a file whose
	// envelope (or decrypted copy) cannot be written.
	envName := name + files.EnvelopeExt
	if err := files.CheckNames(filepath.Dir(f.Abs), f.Rel, envName, files.TempNameShape(envName),
		files.DecryptedName(name, maxDecryptedNames), files.TempNameShape(name)); err != nil {
		return nil, fileRefusal(err)
	}
	size := f.Size()
	if size == 0 {
		return nil, refuseCode(refusal.EmptyFile, "%q is empty; nothing was sent", f.Rel)
	}
	if size > api.MaxDataBytes {
		return nil, refuseCode(refusal.FileTooLarge,
			"%q is %d bytes, over the %d-byte limit; nothing was sent", f.Rel, size, api.MaxDataBytes)
	}
	data, err := readExactly(f.File, size)
	if err != nil {
		return nil, refuseCode(refusal.FileChanged, "%q changed while it was read; nothing was sent; try again", f.Rel)
	}
	return data, nil
}

// placeEnvelope checks, before anything is sent, that the envelope can be
// written: no file at its name (which is never overwritten), and a folder
// that takes it the way writeEnvelope writes it. A refusal releases the
// reservation.
func (s *Server) placeEnvelope(ctx context.Context, f *files.File, key journal.FileKey, envRel string,
	envExists bool) (*files.Placer, error) {
	if envExists {
		if err := s.cfg.Journal.ReleaseFile(ctx, key); err != nil {
			return nil, fmt.Errorf("release file: %w", err)
		}
		return nil, refuseCode(refusal.EnvelopeExists,
			"%q already exists and is never overwritten; nothing was sent; move or remove it first", envRel)
	}
	placer, err := files.ProbeOutput(f.Dir, filepath.FromSlash(envRel), f.Rel)
	if err != nil {
		return nil, s.releaseAfter(ctx, key, fileRefusal(err))
	}
	return placer, nil
}

// encryptSession is the caller's session with room in its scope for the
// key this call makes, and a fresh IV. On failure nothing was sent and the
// reservation goes.
func (s *Server) encryptSession(ctx context.Context, c *call, key journal.FileKey) (GatewaySession, []byte, error) {
	sess, err := s.session(ctx, c)
	if err == nil && len(sess.Objects()) >= api.MaxObjects {
		// Each key this session mints joins its scope, which holds at
		// most 64; the Gateway would refuse the next. A fresh session
		// starts again from the task's own keys.
		s.cfg.Sessions.End(ctx, c.caller)
		sess, err = s.session(ctx, c)
	}
	if err != nil {
		// Nothing was sent: the reservation goes.
		return nil, nil, s.releaseAfter(ctx, key, err)
	}
	iv := make([]byte, api.IVBytes)
	if _, err := rand.Read(iv); err != nil {
		return nil, nil, s.releaseAfter(ctx, key, fmt.Errorf("encrypt_file IV: %w", err))
	}
	return sess, iv, nil
}

// sendEncrypt sends the claimed encrypt. A refusal before any work
// releases the reservation; any other failure, or an answer that is not a
// new key, marks the answer lost: the content is never sent again.
func (s *Server) sendEncrypt(ctx context.Context, c *call, key journal.FileKey, rel string, sess GatewaySession,
	req gateway.EncryptInput) (*gateway.EncryptResult, error) {
	enc, err := sess.Encrypt(ctx, req)
	if err != nil {
		if refusedBeforeWork(err) {
			return nil, s.releaseAfter(ctx, key, err)
		}
		if _, lerr := s.cfg.Journal.MarkAnswerLost(context.WithoutCancel(ctx), key); lerr != nil {
			s.log.Error("journal: mark answer lost", "err", lerr)
		}
		return nil, answerLost(rel, err)
	}
	c.line.Minted = enc.Minted
	c.line.KeyLink = digestOrEmpty(enc.Link)
	if !enc.Minted || enc.Link == "" {
		// Not the new key this tool asks for: nothing may be written
		// under it, and the content is not sent again.
		if _, lerr := s.cfg.Journal.MarkAnswerLost(context.WithoutCancel(ctx), key); lerr != nil {
			s.log.Error("journal: mark answer lost", "err", lerr)
		}
		return nil, fmt.Errorf("encrypt_file: the Gateway's answer did not report a new key")
	}
	return enc, nil
}

// storeCiphertext keeps a new key's ciphertext in its file beside the
// journal (or, if that cannot be written, in the key's record) and
// returns what recordMinted records.
func (s *Server) storeCiphertext(key journal.FileKey, enc *gateway.EncryptResult, mintedAt time.Time) journal.MintedKey {
	minted := journal.MintedKey{TTag: enc.TTag, LinkDigest: audit.Digest12(enc.Link), IV: enc.IV, MintedAt: mintedAt}
	ctSum := sha256.Sum256(enc.Ciphertext)
	if perr := s.putCiphertext(hex.EncodeToString(ctSum[:]), enc.Ciphertext); perr != nil {
		// The key exists: its answer must be recorded, in the row itself
		// then.
		s.log.Warn("ciphertext file not written; keeping it in the journal row", "err", perr)
		minted.Ciphertext = enc.Ciphertext
	} else {
		minted.CiphertextSHA256 = hex.EncodeToString(ctSum[:])
	}
	return minted
}

// recordMinted records a new key in the journal before its envelope is
// placed, and returns the row: the one of another process that recorded
// first (with its ciphertext), or this one with ct, the ciphertext.
func (s *Server) recordMinted(ctx context.Context, key journal.FileKey, minted journal.MintedKey, ct []byte) (journal.FileRecord, error) {
	row, err := s.cfg.Journal.RecordMinted(context.WithoutCancel(ctx), key, minted)
	if err != nil {
		return row, fmt.Errorf("record minted key: %w", err)
	}
	if row.TTag != minted.TTag {
		// Another answer was recorded first (a second process): write
		// that one's envelope, from the journal.
		if row, err = s.cfg.Journal.GetFile(context.WithoutCancel(ctx), key); err != nil {
			return row, fmt.Errorf("read file row: %w", err)
		}
	} else {
		// The state change does not read the ciphertext back.
		row.Ciphertext = ct
	}
	return row, nil
}

// stagedEnvelope is an envelope written and synced under its staged name
// (files.StagedName of the journal row's key), not yet placed.
type stagedEnvelope struct {
	out  *files.Output
	ttag string
	err  error
}

func (st *stagedEnvelope) discard() { st.out.Discard() }

// stageInBackground is stageEnvelope on a goroutine of its own, while the
// call stores the ciphertext. A panic there is recovered and logged
// (background) and kept as the staging's failure: like any other, it
// makes placeStaged write the envelope the ordinary way, from the journal's
// row, so the call (whose key is already minted) still ends as it should,
// and the staged file is one a later call for the same content removes.
func (s *Server) stageInBackground(placer *files.Placer, envRel string, key journal.FileKey, e files.Envelope) <-chan *stagedEnvelope {
	return background(s, "staging an envelope", func() *stagedEnvelope { return s.stageEnvelope(placer, envRel, key, e) },
		func(err error) *stagedEnvelope { return &stagedEnvelope{ttag: e.TTag, err: err} })
}

// stageEnvelope writes e under envRel's staged name for key. A failure is
// kept for placeStaged, which then writes the envelope the ordinary way.
func (s *Server) stageEnvelope(placer *files.Placer, envRel string, key journal.FileKey, e files.Envelope) *stagedEnvelope {
	st := &stagedEnvelope{ttag: e.TTag}
	st.out, st.err = placer.CreateStaged(filepath.FromSlash(envRel), stagedEnvelopeName(envRel, key), envRel)
	if st.err == nil {
		st.err = fillEnvelope(st.out, e)
	}
	return st
}

// stagedEnvelopeName is the staged name of key's envelope envRel, in its
// folder.
func stagedEnvelopeName(envRel string, key journal.FileKey) string {
	return files.StagedName(path.Base(envRel), key.String())
}

// removeStaged removes the staged envelope a call for key may have left
// when it was killed: a name only that row's calls make.
func removeStaged(dir *os.Root, envRel string, key journal.FileKey) {
	staged := filepath.Join(filepath.Dir(filepath.FromSlash(envRel)), stagedEnvelopeName(envRel, key))
	if err := dir.Remove(staged); err == nil {
		syncDir(dir, filepath.Dir(staged))
	}
}

// placeStaged puts the staged envelope at its name when it is the
// envelope of row's key. Otherwise (another process's key was recorded
// first, the staged write failed, or the staged file is gone: a retry of
// the same content removed it as left by a kill) the envelope is written
// from row the ordinary way.
func (s *Server) placeStaged(dir *os.Root, rel, plainName string, size int64, row journal.FileRecord, placer *files.Placer,
	st *stagedEnvelope) error {
	if st.err == nil && st.ttag == row.TTag {
		err := placeEnvelopeFile(dir, st.out, rel)
		var r *Refusal
		if err == nil || errors.As(err, &r) {
			return err
		}
		st.err = err
	}
	if st.err != nil {
		s.log.Warn("staged envelope not placed; writing it again", "err", st.err)
	}
	st.discard()
	return s.writeEnvelope(dir, rel, plainName, size, row, placer)
}

// replayEncrypt answers an encrypt_file of content this caller already
// encrypted at this path: the first result, with the envelope written again
// if it is gone. Nothing is sent.
func (s *Server) replayEncrypt(ctx context.Context, c *call, dir *os.Root, row journal.FileRecord,
	out encryptFileResult) (encryptFileResult, error) {
	var zero encryptFileResult
	// A call killed after it staged the envelope left it under this
	// row's staged name; nothing else makes that name.
	removeStaged(dir, out.Envelope, row.Key)
	switch row.State {
	case journal.FileReserved, journal.FileAnswerLost:
		return zero, answerLost(out.Path, nil)
	}
	c.line.KeyLink = row.LinkDigest
	out.Replayed = true
	ours, exists, err := envelopeMatches(dir, out.Envelope, row)
	if err != nil {
		return zero, err
	}
	switch {
	case exists && !ours:
		return zero, refuseCode(refusal.EnvelopeExists,
			"%q exists but is not the envelope of this content; it is never overwritten; nothing was sent; move or remove it first",
			out.Envelope)
	case !exists:
		if row.Ciphertext == nil {
			ct, err := s.getCiphertext(row.CiphertextSHA256)
			if err != nil {
				s.log.Error("stored ciphertext unreadable", "err", err)
				return zero, refuseCode(refusal.CiphertextUnavailable,
					"the envelope of %q is gone and the server's copy of its ciphertext cannot be read; nothing was sent and no key "+
						"was made; report this to the operator", out.Path)
			}
			row.Ciphertext = ct
		}
		if err := s.writeEnvelope(dir, out.Envelope, path.Base(out.Path), out.Bytes, row, nil); err != nil {
			return zero, err
		}
		out.Rewritten = true
	}
	if row.State != journal.FileDone {
		if _, err := s.cfg.Journal.MarkFileDone(context.WithoutCancel(ctx), row.Key); err != nil {
			return zero, fmt.Errorf("mark file done: %w", err)
		}
	}
	return out, nil
}

func answerLost(rel string, cause error) *Refusal {
	detail := "an earlier encrypt_file of this same content of %q was sent and its answer never arrived (or the server stopped): " +
		"a key may have been created and left unused. It is not sent again, so no second key is made; nothing was sent now. " +
		"Report this to the operator; changing the file's content makes it a new encryption."
	if cause != nil {
		var ae *api.Error
		if errors.As(cause, &ae) {
			detail += " (the Gateway call ended " + ae.Code + ")"
		}
	}
	return refuseCode(refusal.EncryptAnswerLost, detail, rel)
}

// refusedBeforeWork reports an encrypt the Gateway or key server refused
// outright: no key was created, so the reservation may be released. A lost
// connection, a timeout, an unreadable answer or a 5xx may have come after
// the key was made. `pdmcp protect` applies the same rule.
func refusedBeforeWork(err error) bool { return api.RefusedBeforeWork(err) }

func (s *Server) releaseAfter(ctx context.Context, key journal.FileKey, err error) error {
	if rerr := s.cfg.Journal.ReleaseFile(context.WithoutCancel(ctx), key); rerr != nil {
		s.log.Error("journal: release file", "err", rerr)
	}
	return err
}

// readExactly reads size bytes and confirms the file ends there.
func readExactly(r io.Reader, size int64) ([]byte, error) {
	buf := make([]byte, size)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	var one [1]byte
	if n, _ := r.Read(one[:]); n != 0 {
		return nil, errors.New("the file grew")
	}
	return buf, nil
}

// envelopeMatches reports whether rel holds the envelope of row (same key,
// IV and ciphertext). exists is false when there is no such name.
func envelopeMatches(dir *os.Root, rel string, row journal.FileRecord) (ours, exists bool, err error) {
	native := filepath.FromSlash(rel)
	fi, err := dir.Lstat(native)
	if errors.Is(err, fs.ErrNotExist) {
		return false, false, nil
	}
	if err != nil {
		return false, true, nil
	}
	if !fi.Mode().IsRegular() || fi.Size() > files.MaxEnvelopeBytes {
		return false, true, nil
	}
	f, err := dir.OpenFile(native, os.O_RDONLY, 0)
	if err != nil {
		return false, true, nil
	}
	defer f.Close()
	env, err := files.ReadEnvelope(f, fi.Size(), rel)
	if err != nil {
		return false, true, nil
	}
	sum := sha256.Sum256(env.Ciphertext)
	return env.TTag == row.TTag && string(env.IV) == string(row.IV) && hex.EncodeToString(sum[:]) == row.CiphertextSHA256, true, nil
}

// writeEnvelope writes row's envelope as rel, atomically and never over an
// existing file: a temporary file in the same folder, synced, then placed
// at its name the way placer found (probed here when nil): a link or a
// no-replace rename, either of which fails if the name exists, and the
// temporary removed. size is the plaintext's: the content the row names has
// that size.
func (s *Server) writeEnvelope(dir *os.Root, rel, plainName string, size int64, row journal.FileRecord, placer *files.Placer) error {
	native := filepath.FromSlash(rel)
	if placer == nil {
		var err error
		if placer, err = files.ProbeOutput(dir, native, rel); err != nil {
			return fileRefusal(err)
		}
	}
	output, err := placer.Create(native, rel)
	if err != nil {
		return fileRefusal(err)
	}
	defer output.Discard()
	if err := fillEnvelope(output, files.Envelope{CreatedAt: row.MintedAt, TTag: row.TTag, IV: row.IV,
		Ciphertext: row.Ciphertext, Name: plainName, Bytes: size, SHA256: row.Key.ContentSHA256}); err != nil {
		return err
	}
	return placeEnvelopeFile(dir, output, rel)
}

// fillEnvelope writes e into the temporary output and closes it, synced.
func fillEnvelope(output *files.Output, e files.Envelope) error {
	err := files.WriteEnvelope(output.File, e)
	if cerr := output.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write envelope: %w", err)
	}
	return nil
}

// placeEnvelopeFile puts the closed output at rel, never over a file
// there (refused ENVELOPE_EXISTS), and makes the name durable.
func placeEnvelopeFile(dir *os.Root, output *files.Output, rel string) error {
	native := filepath.FromSlash(rel)
	if err := output.Place(native); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return envelopeAppeared(rel)
		}
		return fmt.Errorf("place envelope: %w", err)
	}
	syncDir(dir, filepath.Dir(native))
	return nil
}

// envelopeAppeared refuses an envelope whose name was taken while it was
// being written.
func envelopeAppeared(rel string) *Refusal {
	return refuseCode(refusal.EnvelopeExists,
		"%q appeared while it was being written and is never overwritten; the key is recorded: move or remove that file "+
			"and call encrypt_file again to write the envelope", rel)
}

// syncDir makes a rename or link in folder durable; a failure is not
// fatal (the file itself is synced).
func syncDir(dir *os.Root, folder string) {
	if folder == "" {
		folder = "."
	}
	if d, err := dir.Open(folder); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
