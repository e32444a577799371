package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/server/files"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// decryptFileResult is what decrypt_file returns: never the content.
type decryptFileResult struct {
	Path     string `json:"path" jsonschema:"the plaintext file written, relative to the task's folder; read it if the task needs the content"`
	Envelope string `json:"envelope" jsonschema:"the .pisoft that was decrypted, relative to the task's folder; it is left as it was"`
	Bytes    int64  `json:"bytes" jsonschema:"the size of the written file in bytes"`
	SHA256   string `json:"sha256" jsonschema:"the hex sha256 of the written content, the one recorded when it was encrypted"`
	Replayed bool   `json:"replayed" jsonschema:"true when a decrypted copy with this content was already beside the envelope: its path is returned and nothing was written"`
}

// decryptFile opens a .pisoft envelope into a decrypted copy beside it;
// its tool is declared in filetools.go.
func (s *Server) decryptFile(ctx context.Context, c *call, in fileInput) (decryptFileResult, error) {
	var zero decryptFileResult
	f, dir, name, err := s.openFile(c, in.Path)
	if err != nil {
		return zero, err
	}
	defer f.Close()
	if !files.IsEnvelopeName(name) {
		return zero, refuseCode(refusal.NotAnEnvelope,
			"%q is not a .pisoft envelope; nothing was sent; decrypt_file opens only what encrypt_file wrote", f.Rel)
	}
	if f.Size() == 0 {
		return zero, refuseCode(refusal.EmptyFile, "%q is empty; nothing was sent", f.Rel)
	}
	if f.Size() > files.MaxEnvelopeBytes {
		return zero, refuseCode(refusal.FileTooLarge,
			"%q is %d bytes, larger than any envelope of a file within the %d-byte limit; nothing was read or sent",
			f.Rel, f.Size(), api.MaxDataBytes)
	}
	env, err := files.ReadEnvelope(f.File, f.Size(), f.Rel)
	if err != nil {
		return zero, fileRefusal(err)
	}
	// The envelope is the model's to edit: its t-Tag counts only if the
	// journal says encrypt_file minted that key in this folder, and its IV
	// and ciphertext must be the ones recorded then.
	row, err := s.cfg.Journal.MintedFile(ctx, s.files.Root(), env.TTag)
	if errors.Is(err, journal.ErrNotFound) {
		return zero, refuseCode(refusal.KeyNotMintedHere,
			"%q names a key that encrypt_file did not create in this task's folder; nothing was sent", f.Rel)
	}
	if err != nil {
		return zero, fmt.Errorf("look up minted key: %w", err)
	}
	sum := sha256.Sum256(env.Ciphertext)
	if string(env.IV) != string(row.IV) || hex.EncodeToString(sum[:]) != row.CiphertextSHA256 {
		return zero, refuseCode(refusal.NotAnEnvelope,
			"%q was changed after encrypt_file wrote it (its IV or ciphertext is not the one recorded); nothing was sent", f.Rel)
	}
	c.line.PlaintextSHA256 = row.Key.ContentSHA256
	c.line.KeyLink = row.LinkDigest
	// The output's folder is the envelope's own, and its name comes from
	// the journal's record of the encrypted file, never from the envelope.
	// Its names must fit, and its temporary file exist, before the decrypt
	// is sent.
	plainName := path.Base(row.Key.RelPath)
	if err := files.CheckNames(filepath.Dir(f.Abs), f.Rel, files.DecryptedName(plainName, maxDecryptedNames),
		files.TempNameShape(plainName)); err != nil {
		return zero, fileRefusal(err)
	}
	outName := filepath.Join(filepath.FromSlash(dir), plainName)
	placer, err := files.ProbeOutput(f.Dir, outName, f.Rel)
	if err != nil {
		return zero, fileRefusal(err)
	}
	sess, err := s.widenedSession(ctx, c, env.TTag)
	if err != nil {
		return zero, err
	}
	dec, err := sess.DecryptWithLink(ctx, env.TTag, env.IV, env.Ciphertext)
	if err != nil {
		return zero, err
	}
	env.Ciphertext = nil
	if dec.Link != "" {
		c.line.KeyLink = digestOrEmpty(dec.Link)
	}
	psum := sha256.Sum256(dec.Plaintext)
	if hex.EncodeToString(psum[:]) != row.Key.ContentSHA256 {
		return zero, refuseCode(refusal.IntegrityMismatch,
			"the decrypted content's sha256 is not the one recorded when %q was encrypted; nothing was written", f.Rel)
	}
	output, err := placer.Create(outName, f.Rel)
	if err != nil {
		return zero, fileRefusal(err)
	}
	defer output.Discard()
	outRel, replayed, err := writeDecrypted(output, f.Dir, dir, plainName, dec.Plaintext)
	if err != nil {
		return zero, err
	}
	return decryptFileResult{Path: outRel, Envelope: f.Rel, Bytes: int64(len(dec.Plaintext)), SHA256: row.Key.ContentSHA256,
		Replayed: replayed}, nil
}

// writeDecrypted writes data beside the envelope under the first free name
// of <name>.decrypted<ext>, -2, -3, ...: into output (a temporary file in
// that folder), synced, then placed at the name by a link or a no-replace
// rename, so a name that exists (a file or a link, even a dangling one) is
// never written through or over. A retry of the same envelope writes no
// second copy: the first name that holds a regular file with exactly data
// is returned instead (replayed). The decrypt was still sent, so the key
// server decided this caller's access again; only the write is skipped.
func writeDecrypted(output *files.Output, dir *os.Root, folder, plainName string, data []byte) (rel string, replayed bool, err error) {
	for n := 1; n <= maxDecryptedNames; n++ {
		rel := folder + files.DecryptedName(plainName, n)
		same, err := holdsExactly(dir, filepath.FromSlash(rel), data)
		if err != nil {
			return "", false, err
		}
		if same {
			return rel, true, nil
		}
	}
	_, err = output.File.Write(data)
	if cerr := output.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", false, fmt.Errorf("write decrypted file: %w", err)
	}
	for n := 1; n <= maxDecryptedNames; n++ {
		rel := folder + files.DecryptedName(plainName, n)
		err := output.Place(filepath.FromSlash(rel))
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", false, fmt.Errorf("place decrypted file: %w", err)
		}
		syncDir(dir, filepath.FromSlash(folder))
		return rel, false, nil
	}
	return "", false, refuseCode(refusal.EnvelopeExists,
		"%d decrypted copies of %q already exist beside it; nothing was written; remove some first", maxDecryptedNames, plainName)
}

// holdsExactly reports whether name, under dir, is a regular file (not a
// link) whose content is data. A missing name, a link, a folder or a file
// of another size is false without reading it.
func holdsExactly(dir *os.Root, name string, data []byte) (bool, error) {
	fi, err := dir.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look at decrypted copy: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() != int64(len(data)) {
		return false, nil
	}
	f, err := dir.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return false, nil // gone or unreadable since: not the same copy
	}
	defer f.Close()
	if opened, err := f.Stat(); err != nil || !os.SameFile(fi, opened) {
		return false, nil // swapped between the look and the open
	}
	want := sha256.Sum256(data)
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, int64(len(data))+1)); err != nil {
		return false, nil
	}
	return bytes.Equal(h.Sum(nil), want[:]), nil
}
