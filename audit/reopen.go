package audit

import "fmt"

// Reopen closes the audit file and opens its path again, for log rotation:
// after `mv audit.jsonl audit.jsonl.1` and a Reopen, new lines go to a new
// audit.jsonl (created with mode 0600) and the renamed file is flushed and
// closed whole. It holds the lock Write holds, so every line goes whole to
// one file or the other. The new file gets the checks Open makes (private,
// regular, no symbolic link) and its torn tail is fenced off; when it cannot
// be opened the old file is kept and written to, and the error says why. A
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
	l.f, l.torn = f, false
	l.fenceTornTail(fi.Size())
	syncErr := old.Sync()
	if err := old.Close(); err != nil {
		return fmt.Errorf("audit: reopen: close the previous file: %w", err)
	}
	if syncErr != nil {
		return fmt.Errorf("audit: reopen: sync the previous file: %w", syncErr)
	}
	return nil
}
