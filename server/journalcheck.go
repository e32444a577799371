package server

import (
	"errors"

	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// checkJournal refuses RECORD_UNAVAILABLE, before anything is sent, when
// the journal file was removed or replaced since the server opened it (as
// currentManifest notices a changed manifest, by the file's identity).
// SQLite would go on writing to the file it holds open, which no one else
// reads and which goes when the server stops: every save from then on
// would get a receipt and be lost. So saves, encrypt_file (whose key only
// the journal records) and hand_off (whose entries close_step revokes by
// the journal) are refused until the operator restarts the server on a
// good journal. The first refusal is logged.
func (s *Server) checkJournal() error {
	err := s.cfg.Journal.CheckFile()
	if err == nil {
		return nil
	}
	if !errors.Is(err, journal.ErrReplaced) {
		// A stat that failed for another reason (a folder made unreadable)
		// is no proof the record is gone: the write itself will tell.
		s.log.Warn("the journal file could not be looked at", "path", s.cfg.Journal.Path(), "err", err)
		return nil
	}
	if s.journalGone.CompareAndSwap(false, true) {
		s.log.Error("the journal was removed or replaced while serving; saves are refused until the server is restarted on a good journal (pdmcp check --repair)",
			"path", s.cfg.Journal.Path(), "err", err)
	}
	return refuseCode(refusal.RecordUnavailable,
		"the server's record of saved versions was removed or replaced while it ran, so this would not be kept; nothing was sent; "+
			"ask the operator to restart the server on a good journal, then call again with the same idempotencyKey")
}
