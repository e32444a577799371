// Package grant holds the two files that decide what a task may reach before
// any Gateway call: the operator's manifest and the task grant. It reads,
// checks and writes them, applies the launcher's rules (what `pdmcp grant`
// writes), and keeps the seed record that seed, the launcher and cleanup
// share. It makes no network calls and knows nothing about MCP.
//
// Every file here is JSON read strictly: an unknown field, a key given twice
// (compared ignoring case, so two ids cannot collide on a case-insensitive
// file system), trailing data, or a file that group or others can write is
// refused with an error naming the file and the field. Every write is
// atomic: a temporary file in the same folder, mode 0600, synced, then
// renamed over the target, so a reader sees the old file or the new one and
// never half of either. The manifest and the seed record are shared by
// several processes: their writers ([UpdateManifest], [CreateManifest],
// [UpdateSeedRecord]) take the file's lock file beside it
// (internal/filelock), read the file again under it, change that copy and
// rename it into place, so no writer loses another's change.
//
// # Ids
//
// Document, fragment, destination, step and data-type ids are 1 to 128
// characters of ASCII letters, digits, '-', '_' and '.', starting with a
// letter or a digit. They end up in file names, so nothing else is allowed.
//
// # The manifest (manifest.json)
//
// Written by the operator (seed, protect) and trusted. Paths in it are
// relative to the manifest's own folder, use '/', and may not leave that
// folder; [Manifest.Resolve] turns one into an absolute path.
//
//	{
//	  "version": 1,
//	  "documents": {
//	    "proposal-aurora": {
//	      "label": "Proposal: Aurora", "category": "proposal", "approved": true,
//	      "contentType": "text/plain", "version": 1,
//	      "path": "documents/proposal-aurora.v1.bin",
//	      "ttag": "<the document's key>", "iv": "<base64 of 16 bytes>",
//	      "sha256": "<64 hex digits of the plaintext>", "size": 1834
//	    },
//	    "ccd-0001": {
//	      "kind": "compound",
//	      "label": "Continuity of care", "category": "clinical", "approved": true,
//	      "contentType": "application/xml", "version": 1,
//	      "sha256": "<optional: the source as protected>", "size": 9120,
//	      "skeleton": "documents/ccd-0001/skeleton.xml",
//	      "skeletonSha256": "<optional: the skeleton file>",
//	      "fragments": [
//	        {"id": "problems", "label": "Problems", "dataType": "problems",
//	         "path": "documents/ccd-0001/problems.v1.bin",
//	         "iv": "<base64>", "sha256": "<hex>", "size": 812, "version": 1}
//	      ]
//	    }
//	  },
//	  "destinations": {
//	    "evaluation-summary": {
//	      "label": "Evaluation summary", "ttag": "<the destination's key>",
//	      "versions": [
//	        {"version": 1, "path": "results/evaluation-summary.v1.bin",
//	         "iv": "<base64>", "sha256": "<hex>", "size": 420,
//	         "savedAt": "2026-10-24T12:00:00Z"}
//	      ]
//	    }
//	  },
//	  "compoundKeys": {"problems": "<t-Tag>", "results": "<t-Tag>"},
//	  "steps": {
//	    "referral-history": {
//	      "label": "Referral: history of present illness",
//	      "from": "<the delegating user, as the Gateway names her>",
//	      "to": {"label": "Dr. Bob", "actingAs": "<the recipient>",
//	             "systemId": 1234567890, "principalId": "1004"},
//	      "documents": {"ccd-0001": ["problems"]},
//	      "maxWindowSeconds": 1800,
//	      "confirm": "none"
//	    }
//	  }
//	}
//
// A single document (no kind) has its own path, ttag, iv, sha256 and size.
// A compound document has none of path, ttag and iv: its sections are its
// fragments, each encrypted under the key compoundKeys names for its data
// type, and its skeleton is the plaintext that holds them together. A
// destination's ttag may be absent (the server then refuses saves to it);
// versions, when present, are saves made before the journal's record of
// saved versions existed, oldest first: history, read and never rewritten
// by the server, which records every new save (and every section's new
// version) in the journal beside the manifest (package server/record joins
// the two; `pdmcp export-manifest` writes them merged in this format).
// Every step's documents are
// compound documents of this manifest, and every data type it names is one
// of that document's fragments'. confirm is "none" or "elicit".
//
// # The task grant (grant.json)
//
// Written by the launcher ([Launch]) with mode 0600, and refused by [Load]
// when group or others can write it.
//
//	{
//	  "id": "3f9c2a7d41b06e85", "version": 1,
//	  "allowedTools": ["list_approved_documents", "read_protected_document",
//	                   "save_protected_result"],
//	  "localUser": "<tag>.agent",
//	  "documents": ["proposal-aurora"], "destinations": ["evaluation-summary"],
//	  "issuedAt": "2026-10-24T12:00:00Z", "notAfter": "2026-10-24T12:15:00Z",
//	  "manifest": "/srv/task-data/manifest.json"
//	}
//
// Exactly one of localUser (stdio: the one principal the session acts as)
// and "callerIdentity": true (HTTP: each caller acts as themselves) is set.
// "fileRoot" (absolute, symbolic links resolved) is present for a file task
// and "steps" for a task that may hand sections on. The t-Tags of the
// grant's documents (every fragment's key for a compound one) and
// destinations are the scoped session's objects; more than 64 distinct ones
// is GRANT_TOO_WIDE.
//
// # The seed record (seed-record.json)
//
//	{"agentUser": "<tag>.agent", "ownerUser": "<tag>.owner",
//	 "principals": ["<tag>.agent", "<tag>.owner"],
//	 "keys": ["<t-Tag>", "..."], "manifest": "/srv/task-data/manifest.json"}
//
// What seed created, so that the launcher knows the agent's user and cleanup
// knows what to remove.
package grant
