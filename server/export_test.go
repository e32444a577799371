package server

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/pdmcp/pdmcp/server/files"
	"github.com/pdmcp/pdmcp/server/journal"
)

// SaveLockFile is the cross-process lock file that a result save to
// destination under idem takes on a stdio server built from cfg: what a
// test holds to play another server stopped in the middle of that save.
func SaveLockFile(cfg Config, destination, idem string) string {
	s := &Server{cfg: cfg}
	key := journal.SaveKey{Caller: s.saveCaller(&call{}), Destination: destination, IdempotencyKey: idem}
	return saveLockPath(s.encryptLockDir(), resultIdemLock(key))
}

// EncryptLockFile is the cross-process lock file that encrypt_file of the
// file rel (relative to the grant's file root) holding content takes on a
// stdio server built from cfg.
func EncryptLockFile(cfg Config, rel string, content []byte) (string, error) {
	r, err := files.NewResolver(cfg.Grant.FileRoot)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(content)
	key := journal.FileKey{Root: r.Root(), RelPath: rel, ContentSHA256: hex.EncodeToString(sum[:])}
	s := &Server{cfg: cfg}
	return encryptLockPath(s.encryptLockDir(), key), nil
}
