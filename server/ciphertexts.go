package server

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/server/files"
)

// encrypt_file keeps each ciphertext it records in a file of its own, named
// by the ciphertext's sha256, in a folder beside the journal
// (<journal>.ciphertexts, mode 700, files 600); the journal row names it by
// that hash. A deleted envelope is written again from it. Kept in the
// journal's row instead, a 16 MiB ciphertext costs SQLite two more copies
// of itself in memory.

// ciphertextDir is where the ciphertexts live.
func (s *Server) ciphertextDir() string { return s.cfg.Journal.Path() + ".ciphertexts" }

// putCiphertext stores ct under its sha256 (given), durably, and is a no-op
// when a file of that name and size is there already.
func (s *Server) putCiphertext(sha string, ct []byte) error {
	dir := s.ciphertextDir()
	// The folder's own name made durable too (its parent fsynced when it
	// is new): a journal row may name a file in it once this returns.
	parent, err := os.OpenRoot(filepath.Dir(dir))
	if err != nil {
		return fmt.Errorf("ciphertext folder: %w", err)
	}
	err = mkdirDurable(parent, filepath.Base(dir))
	parent.Close()
	if err != nil {
		return fmt.Errorf("ciphertext folder: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("ciphertext folder: %w", err)
	}
	defer root.Close()
	name := sha + ".bin"
	if fi, err := root.Lstat(name); err == nil && fi.Mode().IsRegular() && fi.Size() == int64(len(ct)) {
		return nil
	}
	tmp, f, err := files.CreateTempIn(root, "", name)
	if err != nil {
		return fmt.Errorf("ciphertext file: %w", err)
	}
	defer root.Remove(tmp)
	_, err = f.Write(ct)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// The name is the content's hash: replacing a partial file left
		// by a crash is safe.
		err = root.Rename(tmp, name)
	}
	if err != nil {
		return fmt.Errorf("ciphertext file: %w", err)
	}
	syncDir(root, ".")
	return nil
}

// getCiphertext reads the ciphertext with sha256 sha and checks it.
func (s *Server) getCiphertext(sha string) ([]byte, error) {
	root, err := os.OpenRoot(s.ciphertextDir())
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(sha + ".bin")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ct, err := io.ReadAll(io.LimitReader(f, api.MaxDataBytes+1024))
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(ct)
	if hex.EncodeToString(sum[:]) != sha {
		return nil, errors.New("the stored ciphertext does not match its recorded sha256")
	}
	return ct, nil
}
