// Package files decides which file a file tool's path argument names, and
// refuses every path that is not one regular file strictly inside the grant's
// file root. It is pure policy over the filesystem: no Gateway, no journal,
// no MCP. The tools in package server call it before anything is sent.
//
// A path is judged in this order, and the first rule it breaks is the code
// returned:
//
//  1. Form (no filesystem access): PATH_EMPTY for "", PATH_FORM_REFUSED for
//     a control character (every Unicode Cc: C0, DEL, C1) or a
//     bidirectional-text control, for invalid UTF-8 and for a path over
//     [MaxPathBytes]; UNC_OR_DEVICE_PATH for two leading separators in any
//     mix of / and \ (\\server\share, \\?\, \\.\, //server/share) and for
//     \??\; ALTERNATE_STREAM for a ':' anywhere but a drive letter (C: at
//     the start followed by a separator). Then, in the Windows flavor only,
//     UNC_OR_DEVICE_PATH for a reserved device name as a component (CON,
//     NUL, COM1, LPT1, ..., with or without an extension) and
//     PATH_FORM_REFUSED for a component ending in a dot or a space (Windows
//     drops those, so "a.pisoft." would open "a.pisoft"). A drive-relative
//     form ("C:name", "C:") is PATH_FORM_REFUSED in both flavors.
//  2. OUTSIDE_ROOT, judged before existence: in the Unix flavor the names
//     are taken one at a time as the kernel takes them (a ".." after a
//     link is the parent of the link's target; a name followed by a
//     separator, "." or ".." must be a folder); in the Windows flavor ".."
//     is taken lexically first (as Win32 and filepath.Clean do). Every
//     symbolic link (and, on Windows, junction) is followed, and the result
//     must be strictly inside the root (the root itself is outside). A link inside the root whose
//     target leaves the root is refused at once, dangling or not, and
//     nothing outside is touched. An absolute path that reaches the root
//     through a link or an ancestor is inside; while a walk is outside the
//     root, every failure is OUTSIDE_ROOT, so no answer says what exists
//     outside. In the Unix flavor a drive-letter path is OUTSIDE_ROOT.
//  3. Resolution inside the root: NOT_FOUND (a missing name, or a file used
//     as a folder), PATH_UNRESOLVABLE (more than [MaxLinks] links followed,
//     a link loop, a name too long, a folder that cannot be read).
//  4. Type: IS_A_DIRECTORY, NOT_A_REGULAR_FILE (fifo, socket, device),
//     HARD_LINKED (a link count above 1: its other name may be outside).
//  5. Open: the file is opened once, through an [os.Root] on the root, and
//     the opened file is checked again; a file swapped between the check
//     and the open (for a link, another file or another type) is
//     FILE_CHANGED.
//
// The separator: both / and \ separate components in both flavors, so a
// path means the same thing wherever the server runs; a Unix file whose name
// contains a backslash cannot be named. Comparisons with the root fold case
// in the Windows flavor.
//
// The Windows forms are decided by the same functions on every platform
// ([CheckForm], [Split], [Within] take a [Flavor]), so they are tested on
// Linux. The codes about content (ALREADY_AN_ENVELOPE, NOT_AN_ENVELOPE,
// EMPTY_FILE, FILE_TOO_LARGE, ENVELOPE_EXISTS, KEY_NOT_MINTED_HERE) are
// declared here with the others and decided by the tools.
package files
