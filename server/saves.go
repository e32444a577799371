package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/internal/crashpoint"
	"github.com/pdmcp/pdmcp/server/journal"
	"github.com/pdmcp/pdmcp/server/refusal"
)

// saveInput is save_protected_result's arguments.
type saveInput struct {
	DestinationID string `json:"destinationId" jsonschema:"a destinationId from list_approved_documents"`
	Text          string `json:"text" jsonschema:"the result to save, UTF-8, at most 65536 bytes"`
	saveKey
}

// saveKey is the argument both save tools take to make a retry safe.
type saveKey struct {
	IdempotencyKey string `json:"idempotencyKey" jsonschema:"1 to 128 characters you choose for this save; reuse it only to retry the same save"`
}

// savedText is how both save receipts end: what was saved, when, under
// which idempotencyKey, and whether this is a replay.
type savedText struct {
	SHA256         string `json:"sha256" jsonschema:"the hex sha256 of the saved text"`
	Size           int64  `json:"size" jsonschema:"the length of the saved text in bytes"`
	SavedAt        string `json:"savedAt" jsonschema:"when the save was made (RFC 3339, UTC); on a replay, when the first one was"`
	IdempotencyKey string `json:"idempotencyKey" jsonschema:"the idempotencyKey this save was made with"`
	Replayed       bool   `json:"replayed" jsonschema:"true when this key had already saved this text: this is the first receipt and nothing new was written"`
}

func savedTextOf(idem string, rc journal.Receipt, replayed bool) savedText {
	return savedText{SHA256: rc.SHA256, Size: rc.Size, SavedAt: rc.SavedAt.UTC().Format(time.RFC3339),
		IdempotencyKey: idem, Replayed: replayed}
}

type saveReceipt struct {
	DestinationID string `json:"destinationId" jsonschema:"the destination saved to"`
	Version       int    `json:"version" jsonschema:"the destination's version this save wrote; earlier versions are kept"`
	savedText
}

func (s *Server) saveTool() tool {
	return newTool(s, mcp.Tool{
		Name:  grant.ToolSaveProtectedResult,
		Title: "Save a protected result",
		Description: description{
			does: "Encrypts text under the destination's existing key and saves it as the destination's next version. " +
				"Returns a receipt: version, sha256, size and time.",
			use: "to keep a result of this task at a destinationId from list_approved_documents. Choose a new " +
				"idempotencyKey for each new save; the same key with the same text returns the first receipt and " +
				"writes nothing, so a save whose answer was lost can be sent again.",
			refuses: "a destination outside this task's grant or without a key yet, text over 65,536 bytes, and the same " +
				"idempotencyKey with other text (IDEMPOTENCY_CONFLICT), before anything is sent.",
			never: "overwrites an earlier version, creates a key, or returns the ciphertext or where it is stored.",
		}.String(),
		Annotations: writes(true, false),
	}, s.save)
}

func (s *Server) save(ctx context.Context, c *call, in saveInput) (saveReceipt, error) {
	var zero saveReceipt
	if !slices.Contains(s.grantNow().Destinations, in.DestinationID) {
		return zero, refuseCode(refusal.DestinationNotInGrant,
			"destination %q is not in this task's grant; nothing was sent; use a destinationId from list_approved_documents",
			in.DestinationID)
	}
	c.line.DocumentID = in.DestinationID
	m := s.currentManifest()
	dest, ok := m.Destinations[in.DestinationID]
	if !ok {
		return zero, refuseCode(refusal.UnknownDestination, "the operator's manifest has no destination %q; nothing was sent", in.DestinationID)
	}
	if dest.TTag == "" {
		return zero, refuseCode(refusal.DestinationHasNoKey,
			"destination %q has no key yet; nothing was sent; the operator must seed one", in.DestinationID)
	}
	if err := in.saveKey.check(); err != nil {
		return zero, err
	}
	if len(in.Text) > MaxTextBytes {
		return zero, refuseCode(refusal.ResultTooLarge, "the text is %d bytes, over the %d-byte limit; nothing was sent; save a shorter result",
			len(in.Text), MaxTextBytes)
	}
	sum := sha256.Sum256([]byte(in.Text))
	key := journal.SaveKey{Caller: s.saveCaller(c), Destination: in.DestinationID, IdempotencyKey: in.IdempotencyKey}
	rc, replayed, err := s.runSave(ctx, c, saveJob{
		key:       key,
		idemLock:  resultIdemLock(key),
		placeLock: "result\x00" + key.Destination,
		idem:      in.IdempotencyKey,
		ttag:      dest.TTag, text: in.Text, textSHA: hex.EncodeToString(sum[:]),
		placer: resultPlacer{dest: in.DestinationID, history: dest},
	})
	if err != nil {
		return zero, err
	}
	c.line.Version = rc.Version
	return receiptOf(in.IdempotencyKey, rc, replayed), nil
}

// saveCaller is the namespace a call's idempotency keys live in: the
// verified user over HTTP, the grant's local user over stdio
// (journal.LocalCaller), so two stdio servers on one folder acting for
// two users never replay or refuse each other's keys. A grant naming
// neither (only tests build one) keeps the stdio caller "".
func (s *Server) saveCaller(c *call) string {
	if c.caller.ID != "" || s.cfg.Grant.LocalUser == "" {
		return c.caller.ID
	}
	return journal.LocalCaller(s.cfg.Grant.LocalUser)
}

// resultIdemLock names a result save for the in-process idempotency lock
// and, by its digest, the cross-process save lock and temporary name.
func resultIdemLock(key journal.SaveKey) string {
	return key.Caller + "\x00" + key.Destination + "\x00" + key.IdempotencyKey
}

// check refuses an idempotencyKey that is not 1 to 128 characters of
// UTF-8, before anything is sent.
func (k saveKey) check() error {
	if n := utf8.RuneCountInString(k.IdempotencyKey); n == 0 || n > 128 || !utf8.ValidString(k.IdempotencyKey) {
		return refuseCode(refusal.InvalidArgument, "idempotencyKey must be 1 to 128 characters; nothing was sent")
	}
	return nil
}

// resultPlacer places a destination's results: results/<id>.v<n>.bin,
// above the versions the manifest lists (history from before the record).
type resultPlacer struct {
	dest    string
	history grant.Destination
}

func (p resultPlacer) floor() int {
	if v, ok := p.history.Latest(); ok {
		return v.Version
	}
	return 0
}

func (p resultPlacer) versionPath(n int) string {
	return path.Join("results", fmt.Sprintf("%s.v%d.bin", p.dest, n))
}

func (resultPlacer) base() journal.DocumentBase { return journal.DocumentBase{} }

func (resultPlacer) points() crashPoints {
	return crashPoints{reserved: crashpoint.SaveReserved, encrypted: crashpoint.SaveEncrypted,
		placed: crashpoint.SavePlaced, sidecar: crashpoint.SaveSidecarWritten, created: crashpoint.SaveFileCreated, written: crashpoint.SaveFileWritten,
		linked: crashpoint.SaveLinked, committed: crashpoint.SaveCommitted}
}

// encryptUnderKey encrypts text under an existing key (a destination's or a
// section's) with a fresh IV and returns the answer to journal, with the
// principal it acted as. Asking again after a lost answer creates nothing
// at the key server, so a save with no recorded answer may call this again.
func (s *Server) encryptUnderKey(ctx context.Context, c *call, ttag, text string) (*journal.EncryptedPayload, error) {
	sess, err := s.session(ctx, c)
	if err != nil {
		return nil, err
	}
	iv := make([]byte, api.IVBytes)
	if _, err := rand.Read(iv); err != nil {
		return nil, fmt.Errorf("save IV: %w", err)
	}
	enc, err := sess.Encrypt(ctx, gateway.EncryptInput{TTag: ttag, IV: iv, Plaintext: []byte(text)})
	if err != nil {
		return nil, err
	}
	c.line.KeyLink = digestOrEmpty(enc.Link)
	return &journal.EncryptedPayload{IV: enc.IV, Ciphertext: enc.Ciphertext, TTag: enc.TTag, ActingAs: sess.ActingAs()}, nil
}

func receiptOf(idem string, rc journal.Receipt, replayed bool) saveReceipt {
	return saveReceipt{DestinationID: rc.Destination, Version: rc.Version, savedText: savedTextOf(idem, rc, replayed)}
}
