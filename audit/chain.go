package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
)

// The hash chain. Every line the Log writes ends with one of two members
// naming the line before it, so that a line edited, inserted, removed or
// moved breaks the chain at the next line (see Verify):
//
//   - "prev": the SHA-256, in lowercase hex, of the line before it in the
//     same file: that line's bytes exactly as they are in the file, from its
//     opening brace to its closing brace (its newline excluded).
//   - "prevFile": on the first whole line of a file only, and on no other:
//     the same hash of the last whole line of the file this one follows
//     (the file it was rotated from), or ZeroHash when the server knew of no
//     line before it (a first run, or an empty file opened at start-up).
//
// A "whole line" is one that is a JSON object; anything else between
// newlines (a torn fragment fenced off after a crash or a full disk, the
// empty line of a fence) is not a line of the chain: the line after it
// chains from the last whole line before it. A third party can check a
// file with a few lines of code: for each line that parses as JSON, hash
// the bytes before its newline and compare with the next such line's
// "prev".
//
// The chain holds within one writing process and across restarts and
// rotations of that process: at open, and before each line when the file
// has changed since the Log's last line (another process, or an edit), the
// Log reads the file's last whole line and chains from it. On Unix the
// read and the write are done under an exclusive flock(2) of the file, so
// servers sharing one file (stdio servers started by several hosts) keep
// one chain between them.
const (
	fieldPrev     = "prev"
	fieldPrevFile = "prevFile"
)

// ZeroHash is what "prevFile" names when no line came before: the start
// of a chain (64 zeros).
const ZeroHash = "0000000000000000000000000000000000000000000000000000000000000000"

// maxSeedScan bounds how far back from a file's end the Log looks for the
// last whole line to chain from. A line is far shorter (its fields are
// bounded), so only a file ending in a megabyte of fragments is not
// searched to its start; the next line then starts a file chain of its own
// ("prevFile"), which Verify reports.
const maxSeedScan = 1 << 20

// lineHash is the chain's hash of one line: its bytes without the newline.
func lineHash(line []byte) string {
	sum := sha256.Sum256(line)
	// Encoded on the stack: the string is the one allocation.
	var h [2 * sha256.Size]byte
	hex.Encode(h[:], sum[:])
	return string(h[:])
}

// isWholeLine reports whether b (a line without its newline) is a line of
// the chain: a JSON object. Writer and verifier use this one rule.
func isWholeLine(b []byte) bool {
	return len(b) > 1 && b[0] == '{' && json.Valid(b)
}

// chainState is the hash the next line names, and how.
type chainState struct {
	// head is the hash the next line names.
	head string
	// fileStart: no whole line is in the file yet, so the next line names
	// head as "prevFile".
	fileStart bool
	// end is the file's size after the Log's last line (or at its last
	// look at the file); a file of another size has been written by
	// someone else since, and is read again before the next line.
	end int64
	// known: head and fileStart describe the file open now.
	known bool
}

// lastWholeLine finds the last whole line in the first size bytes of r,
// looking back at most maxSeedScan bytes. complete reports whether the
// search reached the file's start (so no whole line means there is none),
// and newline whether the file ends in a newline.
func lastWholeLine(r io.ReaderAt, size int64) (line []byte, found, complete, newline bool, err error) {
	if size == 0 {
		return nil, false, true, true, nil
	}
	start := max(0, size-maxSeedScan)
	buf := make([]byte, size-start)
	if _, err := r.ReadAt(buf, start); err != nil && err != io.EOF {
		return nil, false, false, false, err
	}
	newline = buf[len(buf)-1] == '\n'
	if !newline {
		// What follows the last newline is a line only if it is whole (a
		// write that failed before its newline alone): the fence written
		// ahead of the next line ends it, and Verify reads it as a line.
		i := bytes.LastIndexByte(buf, '\n')
		if tail := buf[i+1:]; (i >= 0 || start == 0) && isWholeLine(tail) {
			return tail, true, true, false, nil
		}
		buf = buf[:i+1]
	}
	for len(buf) > 0 {
		buf = buf[:len(buf)-1] // the newline
		i := bytes.LastIndexByte(buf, '\n')
		if i < 0 && start > 0 {
			// The window's first piece may be the end of a longer line.
			break
		}
		if l := buf[i+1:]; isWholeLine(l) {
			return l, true, true, newline, nil
		}
		buf = buf[:i+1]
	}
	return nil, false, start == 0, newline, nil
}

// seedChain reads the end of the open file and sets the chain from its
// last whole line; in a file with none (new, empty, or only fragments) the
// next line is the file's first and names the head the Log already had
// ("prevFile": ZeroHash at open, the rotated file's last hash after
// Reopen). It also marks the file torn when it does not end in a newline.
// Called with l.mu held.
func (l *Log) seedChain() error {
	fi, err := l.f.Stat()
	if err != nil {
		l.chain.known = false
		return err
	}
	line, found, complete, newline, err := lastWholeLine(l.f, fi.Size())
	if err != nil {
		l.chain.known = false
		return err
	}
	if !newline {
		l.torn = true
	}
	switch {
	case found:
		l.chain.head, l.chain.fileStart = lineHash(line), false
	case complete:
		l.chain.fileStart = true
	default:
		l.slogger().Warn("audit file's last megabyte holds no whole line; the next line starts a chain of its own",
			"path", l.path)
		l.chain.fileStart = true
	}
	if l.chain.head == "" {
		l.chain.head = ZeroHash
	}
	l.chain.end, l.chain.known = fi.Size(), true
	return nil
}

// syncChain makes sure the chain state describes the file as it is now,
// reading its end again if someone else wrote to it since the Log's last
// line. Called with l.mu (and on Unix the file lock) held.
func (l *Log) syncChain() error {
	if l.chain.known {
		// The file's size, from the end of the file lseek(2) finds: what
		// fstat(2) says, without the FileInfo. Writes append wherever the
		// offset is, and reads name their own.
		if size, err := l.f.Seek(0, io.SeekEnd); err == nil && size == l.chain.end {
			return nil
		}
	}
	return l.seedChain()
}

// appendMember appends the member the next line ends with, and the
// object's closing brace.
func (c *chainState) appendMember(b []byte) []byte {
	name := fieldPrev
	if c.fileStart {
		name = fieldPrevFile
	}
	b = append(append(append(b, `,"`...), name...), `":"`...)
	return append(append(b, c.head...), `"}`...)
}

// memberRoom is the most appendMember adds, and a newline: what a line's
// buffer leaves room for, so that chaining it does not copy it.
const memberRoom = len(`,"`+fieldPrevFile+`":"`+ZeroHash+`"}`) + 1
