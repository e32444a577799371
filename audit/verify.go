package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// What Verify finds, as Finding.Kind: breaks (Break…), which make a
// Report not whole, and notes (Note…), which do not.
const (
	// BreakPrev: a line's "prev" is not the hash of the whole line before
	// it in the file: that line was edited, or lines were removed, inserted
	// or reordered between the two.
	BreakPrev = "prev-mismatch"
	// BreakUnchained: a whole line names no line before it (neither "prev"
	// nor "prevFile"): a line added by hand, or written by a server from
	// before the chain.
	BreakUnchained = "unchained"
	// BreakFileStart: the first whole line of a file names a line before it
	// in the same file ("prev"): the lines before it were removed.
	BreakFileStart = "file-start"
	// BreakMovedStart: a line after a file's first names "prevFile", which
	// only the first line of a file does: a first line was moved here.
	BreakMovedStart = "moved-start"
	// BreakFileJoin: a file's first line does not name the last line of the
	// file given before it: the files are out of order, a file between
	// them is missing, or the earlier file's last lines were removed.
	BreakFileJoin = "file-join"
	// BreakNewChain: a file after the first starts a chain of its own
	// ("prevFile" is ZeroHash), so its join to the file before is not
	// proved: the server opened it empty at start-up (the file was rotated
	// while the server was stopped), or the files are out of order. Verify
	// the files before it on their own.
	BreakNewChain = "new-chain"
	// BreakTornTail: the file does not end in a newline: its last line was
	// cut (a truncation, or a crash the server has not yet restarted after).
	BreakTornTail = "torn-tail"
	// BreakHeadMissing: a head the operator kept (VerifyOptions.Heads) is
	// the hash of no line in the files: lines up to it were removed from
	// the end, or changed.
	BreakHeadMissing = "head-missing"
	// BreakSignature: a signed head whose signature does not hold for the
	// key given (see heads.go).
	BreakSignature = "bad-signature"

	// NoteFragment: a piece between newlines that is not a whole line: what
	// a crash or a full disk left and the server fenced off. It is not a
	// line of the chain; the line after it chains from the one before.
	NoteFragment = "fragment"
	// NoteUnsigned: with a key given, the lines after the last signed head
	// are covered by the chain only.
	NoteUnsigned = "unsigned-tail"
	// NoteContinues: the first file given continues a file not given; give
	// the files from the first to have the join checked.
	NoteContinues = "continues"
)

// maxFindings bounds the breaks and the notes a Report lists each; the
// totals count them all.
const maxFindings = 100

// Finding is one thing Verify found, at a line: Line counts every
// newline-ended piece of the file from 1, fragments included, as sed and
// an editor number lines.
type Finding struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

// FileReport is what Verify read in one file.
type FileReport struct {
	Path string `json:"path"`
	// Lines is the whole lines; Fragments the pieces that were not.
	Lines     int `json:"lines"`
	Fragments int `json:"fragments"`
	// Head is the hash of the file's last whole line: what the first line
	// of the file rotated after it names as "prevFile".
	Head string `json:"head,omitempty"`
}

// Report is Verify's answer. Whole holds when no break was found.
type Report struct {
	Whole bool         `json:"whole"`
	Files []FileReport `json:"files"`
	// Breaks lists the first maxFindings breaks in file order; the first
	// is the first line that breaks. BreakCount counts them all.
	Breaks     []Finding `json:"breaks"`
	BreakCount int       `json:"breakCount"`
	Notes      []Finding `json:"notes"`
	NoteCount  int       `json:"noteCount"`
	// Head is the hash of the last whole line of the last file: an
	// operator who keeps it elsewhere can later check that nothing was cut
	// from the end (see VerifyOptions.Head).
	Head string `json:"head,omitempty"`
	// SignedHeads counts the signed heads checked with a key.
	SignedHeads int `json:"signedHeads,omitempty"`
}

// VerifyOptions configure Verify.
type VerifyOptions struct {
	// Key, when set, checks the signed heads (see heads.go).
	Key *HeadKey
	// Heads are hashes the operator kept from an earlier Verify (its
	// Report.Head), each of which must still be the hash of a whole line
	// in the files: the chain alone cannot show lines cut off the end, but
	// a head kept elsewhere can.
	Heads []string
}

// chainRef is what a line names as the line before it.
type chainRef struct {
	Prev     *string `json:"prev"`
	PrevFile *string `json:"prevFile"`
	Event    string  `json:"event"`
}

// Verify reads the audit files at paths, given in rotation order (oldest
// first: audit.jsonl.2, audit.jsonl.1, audit.jsonl), and checks the hash
// chain (see chain.go) through them. It returns an error only when a file
// cannot be read; what it finds in the files is in the Report.
func Verify(ctx context.Context, paths []string, o VerifyOptions) (*Report, error) {
	if len(paths) == 0 {
		return nil, errors.New("audit: verify: no file given")
	}
	for _, h := range o.Heads {
		if !isSHA256(h) {
			return nil, fmt.Errorf("audit: verify: a head is 64 lowercase hex digits, as verify prints it; got %d characters", len(h))
		}
	}
	v := &verifier{rep: &Report{Files: []FileReport{}, Breaks: []Finding{}, Notes: []Finding{}}, key: o.Key,
		heads: map[string]bool{}}
	for _, h := range o.Heads {
		v.heads[h] = false
	}
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("audit: verify: %w", err)
		}
		err = v.file(ctx, p, f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("audit: verify %s: %w", p, err)
		}
	}
	v.finishHeads()
	for _, h := range o.Heads {
		if !v.heads[h] {
			v.brk(paths[len(paths)-1], 0, BreakHeadMissing, "no line hashes to the head %s kept from before: lines up to it were cut off the end, or changed", short(h))
		}
	}
	v.rep.Head = v.last
	v.rep.Whole = v.rep.BreakCount == 0
	return v.rep, nil
}

type verifier struct {
	rep  *Report
	key  *HeadKey
	last string // hash of the last whole line read, in any file
	// lastFile is the file last read that had a whole line.
	lastFile string
	// unsigned counts the whole lines after the last signed head checked,
	// found at lastSigned.
	unsigned   int
	lastSigned Finding
	// heads are the kept heads to find, true once found.
	heads map[string]bool
}

func (v *verifier) add(list *[]Finding, count *int, f Finding) {
	*count++
	if len(*list) < maxFindings {
		*list = append(*list, f)
	}
}

func (v *verifier) brk(file string, line int, kind, format string, args ...any) {
	v.add(&v.rep.Breaks, &v.rep.BreakCount, Finding{File: file, Line: line, Kind: kind, Detail: fmt.Sprintf(format, args...)})
}

func (v *verifier) note(file string, line int, kind, format string, args ...any) {
	v.add(&v.rep.Notes, &v.rep.NoteCount, Finding{File: file, Line: line, Kind: kind, Detail: fmt.Sprintf(format, args...)})
}

// file checks one file's lines, carrying the chain from the files before.
func (v *verifier) file(ctx context.Context, path string, r io.Reader) error {
	fr := FileReport{Path: path}
	br := bufio.NewReaderSize(r, 64<<10)
	// lastLine is the number of the file's last whole line; 0 before one.
	lineNo, lastLine := 0, 0
	for {
		b, size, newline, err := readPiece(br)
		if err != nil {
			return err
		}
		if size == 0 && !newline {
			break
		}
		if lineNo%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		lineNo++
		whole := b != nil && isWholeLine(b)
		if !newline {
			what := "not a whole line"
			if whole {
				what = "a whole line"
			}
			v.brk(path, lineNo, BreakTornTail, "the file ends without a newline, in %d bytes that are %s: its end was cut, or the server crashed and has not opened the file since",
				size, what)
		}
		if !whole {
			if newline {
				fr.Fragments++
				v.note(path, lineNo, NoteFragment, "%d bytes that are not a whole line (a write cut short by a crash or a full disk, fenced off); not part of the chain", size)
			}
			continue
		}
		fr.Lines++
		var ref chainRef
		// isWholeLine held, so this is a JSON object; members of other
		// types than a string leave ref empty, which is a break below.
		_ = json.Unmarshal(b, &ref)
		v.check(path, lineNo, lastLine, ref)
		v.unsigned++
		if ref.Event == EventHead {
			v.checkHead(path, lineNo, b, ref)
		}
		v.last, lastLine = lineHash(b), lineNo
		if _, kept := v.heads[v.last]; kept {
			v.heads[v.last] = true
		}
		if !newline {
			break
		}
	}
	if fr.Lines > 0 {
		fr.Head = v.last
		v.lastFile = path
	}
	v.rep.Files = append(v.rep.Files, fr)
	return nil
}

// maxPiece bounds the bytes Verify holds of one line. The server's lines
// are far shorter (their fields are bounded); a longer piece is not a line,
// and what follows it shows whether it stood in for one.
const maxPiece = 16 << 20

// readPiece reads up to and including the next newline. b is the piece
// without its newline, or nil when it is longer than maxPiece (then only
// counted); size its length; newline whether it ended in one (false at
// the end of the file, with size 0 when nothing was left).
func readPiece(br *bufio.Reader) (b []byte, size int64, newline bool, err error) {
	b = []byte{}
	for {
		chunk, err := br.ReadSlice('\n')
		if n := len(chunk); n > 0 && chunk[n-1] == '\n' {
			chunk, newline = chunk[:n-1], true
		}
		size += int64(len(chunk))
		if b != nil && size <= maxPiece {
			b = append(b, chunk...)
		} else {
			b = nil // too long to be a line: only counted
		}
		switch {
		case err == nil || err == io.EOF:
			return b, size, newline, nil
		case !errors.Is(err, bufio.ErrBufferFull):
			return nil, 0, false, err
		}
	}
}

// check checks what one whole line names as the line before it.
func (v *verifier) check(path string, lineNo, lastLine int, ref chainRef) {
	switch {
	case ref.Prev != nil && ref.PrevFile != nil:
		v.brk(path, lineNo, BreakUnchained, "the line names both prev and prevFile; the server writes one")
	case ref.Prev == nil && ref.PrevFile == nil:
		v.brk(path, lineNo, BreakUnchained, "the line names no line before it (no prev or prevFile): added by hand, or written before the chain began")
	case lastLine == 0 && ref.Prev != nil:
		v.brk(path, lineNo, BreakFileStart, "the file's first line names a line before it in this file (prev, %s): the lines before it were removed", short(*ref.Prev))
	case lastLine == 0:
		v.checkJoin(path, lineNo, *ref.PrevFile)
	case ref.PrevFile != nil:
		v.brk(path, lineNo, BreakMovedStart, "the line names prevFile, which only a file's first line does: a file's first line was moved or copied here, after line %d", lastLine)
	case *ref.Prev != v.last:
		v.brk(path, lineNo, BreakPrev, "prev names %s, but line %d hashes to %s: line %d was edited, or lines were removed, inserted or reordered between them",
			short(*ref.Prev), lastLine, short(v.last), lastLine)
	}
}

// checkJoin checks a file's first line against the file given before it.
func (v *verifier) checkJoin(path string, lineNo int, prevFile string) {
	switch {
	case v.lastFile == "" && prevFile == ZeroHash:
		// The start of a chain.
	case v.lastFile == "":
		v.note(path, lineNo, NoteContinues, "the file continues one whose last line hashed to %s; give that file first to check the join", short(prevFile))
	case prevFile == v.last:
	case prevFile == ZeroHash:
		v.brk(path, lineNo, BreakNewChain, "the file starts a chain of its own, so its join to %s is not proved: the files are out of order, or the server opened this one empty at start-up (then verify the files before it on their own)", v.lastFile)
	default:
		v.brk(path, lineNo, BreakFileJoin, "prevFile names %s, but the last line of %s hashes to %s: the files are out of order, a file between them is missing, or the end of %s was removed",
			short(prevFile), v.lastFile, short(v.last), v.lastFile)
	}
}

// short is a hash as a finding shows it: 12 digits, or a note that it is
// not a hash (never the value: a line edited by hand could put anything
// there).
func short(h string) string {
	if isSHA256(h) {
		return h[:12] + "…"
	}
	return "a value that is not a hash"
}
