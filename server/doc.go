// Package server is pdmcp's MCP surface: one mcp.Server built from a task
// grant, the tools the grant allows and nothing else, the refusal type, and
// the Gateway-session sources tools draw on (GrantSessions over stdio,
// PooledSessions over HTTP). Package internal/serve runs it over a
// transport. It decides what the grant allows (the adapter layer) and
// asks the Gateway, through package gateway, for everything else.
//
// How a tool refuses: a handler built with newTool returns a *Refusal (made
// with refuseCode, for the adapter's own decisions), a *refusal.Refusal
// (the catalogue's constructors, server/files, server/handoff) or the
// error a Gateway call gave it; newTool turns each into the one refusal
// rendering (Refusal.result: isError, the refusal JSON in the text
// content, no structuredContent; refusal.go says why). Anything else a
// handler returns is reported as INTERNAL_ERROR without its text. Code
// outside a tool handler (a middleware) returns r.result() itself. No tool builds its own error
// result.
//
// # Fragment, not section
//
// A compound document's parts, each under its own key, are fragments in
// this package's identifiers, as on the wire (read_protected_fragment,
// fragmentId, grant.Fragment, journal.FragmentKey, crashpoint.Fragment*).
// The prose a model or operator reads (tool descriptions, refusal details,
// docs/) calls a fragment a section, the word of the HL7 v2 and C-CDA
// forms, and list_approved_documents' description says that the two are
// one. Names fixed on the wire stay as they are: the "sections" of a read
// and of a step (Go fields named Fragments), and the audit line's. Other
// packages' Section names (handoff.Section, audit.Section,
// compound.CheckSectionText) are the next to follow; server/compound's
// C-CDA section is the XML element, and keeps its name.
//
// # Adding a tool
//
// A tool is a name, two types and a handler; these are the steps, each
// with the test that holds it:
//
//  1. Name it in package grant: a ToolX constant, in grant.AllTools (and in
//     the launcher's group, grant.DocumentTools, FileTools or
//     FragmentTools, when it belongs to one). The mcp.Tool's Name is that
//     constant; no other spelling of it appears here.
//  2. Write a method xTool returning newTool(s, mcp.Tool{...}, s.x) in the
//     file of its family (documents.go, saves.go, fragments.go,
//     filetools.go, handoffs.go, or a new one), and list it in
//     Server.tools where tools/list should show it.
//  3. Input: a struct whose every field has a json name and a jsonschema
//     description. newTool closes the schema and refuses other arguments;
//     the handler checks lengths and forms the schema cannot say.
//  4. Output: a struct whose every property, nested ones too, has a
//     jsonschema description, and which holds only what varies between
//     calls (TestToolDescriptionsHaveTheirParts). Claude Code and Codex
//     hand their model only the structuredContent, other hosts only the
//     content blocks: a result that carries document text declares Notice
//     first and implements content with noticeThenText, so the notice
//     reaches the model either way (TestDocumentTextComesWithTheNotice).
//  5. Description: description{does, use, refuses, never}.String(), each
//     part a few sentences: what it does and returns, when to use it and
//     what to call next, what it refuses, what it never does. Guidance
//     that holds for every call belongs here, not in a result.
//     Annotations: readsOnly() or writes(idempotent, destructive).
//  6. Refusals: refuseCode with a code of the catalogue (package
//     server/refusal: the code, its one status, its hint and its docs
//     page), or one of its constructors (refusal.GrantEnded,
//     refusal.NoVerifiedCaller); a new code gets a catalogue entry and a
//     row in that page's code table (TestCatalogueHasEveryCode,
//     TestDocsTablesMatchTheCatalogue, TestServerCodesAreCatalogued). A
//     refusal's detail says whether anything was sent and what to do.
//  7. The audit line: set c.line's ids only once the grant names them;
//     they are the model's text until then.
//  8. A tool that writes in steps calls s.cfg.CrashPoint at each step
//     boundary with a constant of internal/crashpoint, where the crash
//     suite finds it (TestCrashPointsAllCovered).
//  9. Golden file: PDMCP_UPDATE_GOLDEN=1 go test ./server -run
//     TestToolsGolden writes testdata/tools/<name>.json (everyTool must
//     reach it: a fixture whose grant allows it); review the diff.
//  10. Docs: the tool in the page of its family under docs/, and in
//     docs/hosts.md if hosts need telling.
package server
