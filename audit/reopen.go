package audit

import "fmt"

// Reopen closes the audit file and opens its path again, for log rotation:
// after `mv audit.jsonl audit.jsonl.1` and a Reopen, new lines go to a new
// audit.jsonl (created with mode 0600) and the renamed file is flushed and
// closed whole. It holds the lock Write holds, so every line goes whole to
// one file or the other. The new file gets the checks Open makes (private,
// regular, no symbolic link) and its torn tail is fenced off; when it cannot
// be opened the old file is kept and written to, and the error says why.
// The hash chain goes on: the new file's first line names the rotated
// file's last line as prevFile (a signed head, when the Log has a key), and
// a path that still holds lines (no rename) goes on from its last line. A
// nil, discarding or closed Log has nothing to reopen and returns nil
// (closed: ErrClosed).
func (l *Log) Reopen() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("audit: reopen: %w", ErrClosed)
	}
	if l.f == nil {
		return nil
	}
	f, fi, err := openChecked(l.path)
	if err != nil {
		return fmt.Errorf("audit: reopen kept writing to the file already open: %w", err)
	}
	old := l.f
	// The rotated file ends with a signed head (with a key), and the chain
	// goes on from its last line as the file has it: the new file's first
	// line names it as prevFile.
	if l.headKey != nil && l.sinceHead > 0 {
		l.signHeadLocked()
	} else {
		locked := lockFile(old)
		if err := l.syncChain(); err != nil {
			l.slogger().Warn("audit file's last line could not be read to chain from", "path", l.path, "err", err)
		}
		unlockFile(old, locked)
	}
	l.f, l.torn = f, false
	l.fenceTornTail(fi.Size())
	if err := l.seedChain(); err != nil {
		l.chain.known = false
		l.slogger().Warn("audit file's last line could not be read to chain from; trying again at the next line",
			"path", l.path, "err", err)
	}
	syncErr := old.Sync()
	if err := old.Close(); err != nil {
		return fmt.Errorf("audit: reopen: close the previous file: %w", err)
	}
	if syncErr != nil {
		return fmt.Errorf("audit: reopen: sync the previous file: %w", syncErr)
	}
	return nil
}
