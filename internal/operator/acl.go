package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/gateway/api"
	"github.com/pdmcp/pdmcp/grant"
)

// ACLOptions are `pdmcp acl`'s inputs. The key is named through the
// manifest, never by its t-Tag: exactly one of DocumentID (a single
// document's key), DataType (a compound data type's key, compoundKeys) and
// Destination (a save destination's key).
type ACLOptions struct {
	Config       *gateway.ServiceConfig
	ManifestPath string
	DocumentID   string
	DataType     string
	Destination  string
	// Principal is the grantee as the Gateway names it (with the service's
	// prefix); required for grant and revoke.
	Principal string
	// Rights are READ and WRITE: required for grant (added to the entry);
	// for revoke, the rights taken away (none: the whole entry).
	Rights []string
	// Owner is the key's owner, as the Gateway names it; empty means the
	// seed record's owner.
	Owner string
	// RecordPath is a seed record whose owner is the default Owner; empty
	// means seed-record.json beside the manifest, when there is one.
	RecordPath string
	// Logger gets the Gateway requests; nil discards.
	Logger *slog.Logger
}

// ACLEntry is one entry of a key's access list as `pdmcp acl` reports it:
// never the t-Tag.
type ACLEntry struct {
	// Principal is the principal's name, empty when the Gateway does not
	// name it (another service's principal).
	Principal   string     `json:"principal"`
	SystemID    int64      `json:"systemId"`
	PrincipalID string     `json:"principalId"`
	Rights      []string   `json:"rights"`
	EndTime     *time.Time `json:"endTime,omitempty"`
	Uses        *int       `json:"uses,omitempty"`
}

// ACLReport is what an acl command did, and the key's entries as read back
// after it.
type ACLReport struct {
	Action string `json:"action"`
	// Kind is "document", "data type" or "destination"; Name the manifest's
	// name for it.
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Principal, Before, After and Changed are for grant and revoke: the
	// grantee's rights before and after (empty: no entry), and whether
	// anything was sent to change them.
	Principal string `json:"principal,omitempty"`
	// SystemID and PrincipalID are the named principal's ids, as a hand-off
	// step's "to" names a recipient.
	SystemID    int64      `json:"systemId,omitempty"`
	PrincipalID string     `json:"principalId,omitempty"`
	Before      []string   `json:"before,omitempty"`
	After       []string   `json:"after,omitempty"`
	Changed     bool       `json:"changed"`
	Entries     []ACLEntry `json:"entries"`
}

// ErrACLRefused marks a refusal decided before any change was sent: a key
// the manifest does not name, an unknown principal, an entry this command
// must leave alone.
var ErrACLRefused = errors.New("acl refused")

func aclRefused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrACLRefused, fmt.Sprintf(format, args...))
}

// aclTarget is the key an acl command works on.
type aclTarget struct {
	kind, name, ttag string
}

// ParseRights reads a --rights value: READ and WRITE, comma-separated, in
// any case. OWNER is refused: ownership is not handed out by this command.
func ParseRights(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	set := map[string]bool{}
	for _, r := range strings.Split(s, ",") {
		switch v := strings.ToUpper(strings.TrimSpace(r)); v {
		case api.RightRead, api.RightWrite:
			set[v] = true
		case api.RightOwner:
			return nil, aclRefused("--rights %s: OWNER is not given or taken with pdmcp acl; use READ or WRITE", s)
		default:
			return nil, aclRefused("--rights %s: %q is not a right; use READ, WRITE or READ,WRITE", s, strings.TrimSpace(r))
		}
	}
	return sortRights(slices.Collect(maps.Keys(set))), nil
}

// sortRights orders rights READ, WRITE, OWNER, then any other.
func sortRights(rs []string) []string {
	order := map[string]int{api.RightRead: 0, api.RightWrite: 1, api.RightOwner: 2}
	out := slices.Clone(rs)
	slices.SortFunc(out, func(a, b string) int {
		oa, ok := order[a]
		if !ok {
			oa = 3
		}
		ob, ok := order[b]
		if !ok {
			ob = 3
		}
		if oa != ob {
			return oa - ob
		}
		return strings.Compare(a, b)
	})
	return slices.Compact(out)
}

// resolve reads the manifest and the seed record and settles the key, its
// owner and the options' shape; it sends nothing.
func (o *ACLOptions) resolve(action string) (aclTarget, string, error) {
	if o.Config == nil || o.ManifestPath == "" {
		return aclTarget{}, "", errors.New("acl: --config and --manifest are required")
	}
	named := countNonEmpty(o.DocumentID, o.DataType, o.Destination)
	if named != 1 {
		return aclTarget{}, "", aclRefused("name exactly one key: --document, --data-type or --destination (got %d)", named)
	}
	switch action {
	case "grant":
		if o.Principal == "" || len(o.Rights) == 0 {
			return aclTarget{}, "", aclRefused("acl grant needs --principal and --rights (READ, WRITE or READ,WRITE)")
		}
	case "revoke":
		if o.Principal == "" {
			return aclTarget{}, "", aclRefused("acl revoke needs --principal")
		}
	}
	m, err := grant.LoadManifest(o.ManifestPath)
	if err != nil {
		return aclTarget{}, "", fmt.Errorf("acl: %w", err)
	}
	t, err := aclKey(m, o)
	if err != nil {
		return aclTarget{}, "", err
	}
	owner := o.Owner
	if owner == "" {
		rec := o.RecordPath
		if rec == "" {
			rec = filepath.Join(m.Dir(), "seed-record.json")
			if _, err := os.Lstat(rec); err != nil {
				return aclTarget{}, "", aclRefused("name the key's owner with --owner, or --seed-record a seed record whose owner it is (there is no %s)", rec)
			}
		}
		r, err := grant.LoadSeedRecord(rec)
		if err != nil {
			return aclTarget{}, "", fmt.Errorf("acl: %w", err)
		}
		if r.OwnerUser == "" {
			return aclTarget{}, "", aclRefused("the seed record %s names no owner; name it with --owner", rec)
		}
		owner = r.OwnerUser
	}
	if action != "list" && o.Principal == owner {
		return aclTarget{}, "", aclRefused("%s is the key's owner; its entry is not changed with pdmcp acl", o.Principal)
	}
	return t, owner, nil
}

// aclKey finds the key the options name in the manifest.
func aclKey(m *grant.Manifest, o *ACLOptions) (aclTarget, error) {
	switch {
	case o.DocumentID != "":
		d, ok := m.Documents[o.DocumentID]
		if !ok {
			return aclTarget{}, aclRefused("the manifest has no document %q", o.DocumentID)
		}
		if d.IsCompound() {
			return aclTarget{}, aclRefused("%s is a compound document: its sections are under its data types' keys; name one with --data-type (%s)",
				o.DocumentID, strings.Join(d.DataTypes(), ", "))
		}
		return aclTarget{kind: "document", name: o.DocumentID, ttag: d.TTag}, nil
	case o.DataType != "":
		k, ok := m.CompoundKeys[o.DataType]
		if !ok {
			known := slices.Sorted(maps.Keys(m.CompoundKeys))
			if len(known) == 0 {
				return aclTarget{}, aclRefused("the manifest has no data type %q: it has no compound documents (pdmcp protect adds them)", o.DataType)
			}
			return aclTarget{}, aclRefused("the manifest has no data type %q; it has %s", o.DataType, strings.Join(known, ", "))
		}
		return aclTarget{kind: "data type", name: o.DataType, ttag: k}, nil
	default:
		d, ok := m.Destinations[o.Destination]
		if !ok {
			return aclTarget{}, aclRefused("the manifest has no destination %q", o.Destination)
		}
		return aclTarget{kind: "destination", name: o.Destination, ttag: d.TTag}, nil
	}
}

// aclRun is one acl command's connection: the owner's session on the one
// key.
type aclRun struct {
	owner *gateway.Session
	t     aclTarget
}

// openACL signs in, resolves the principal (when one is named) before anything
// else is asked, and mints the owner's session on the key. The caller
// closes the run.
func openACL(ctx context.Context, o *ACLOptions, t aclTarget, owner string) (*aclRun, *api.Principal, error) {
	c, err := gateway.New(clientConfig(o.Config, o.Logger))
	if err != nil {
		return nil, nil, err
	}
	if err := c.SignIn(ctx); err != nil {
		return nil, nil, fmt.Errorf("acl: sign in: %w", err)
	}
	var p *api.Principal
	if o.Principal != "" {
		p, err = c.GetPrincipal(ctx, o.Principal)
		if errors.Is(err, &api.Error{Code: api.CodeNotFound}) {
			return nil, nil, aclRefused("the Gateway has no principal named %s", o.Principal)
		}
		if errors.Is(err, &api.Error{Code: api.CodeBadRequest}) {
			return nil, nil, fmt.Errorf("%w: principal %s: %w", ErrACLRefused, o.Principal, err)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("acl: read principal %s: %w", o.Principal, err)
		}
	}
	// On this one key only, and revoked when the command ends.
	s, err := c.Mint(ctx, gateway.MintRequest{ActingAs: owner, Objects: []string{t.ttag}, TTL: api.MaxScopedTTL})
	if err != nil {
		return nil, nil, fmt.Errorf("acl: session as the key's owner %s: %w", owner, err)
	}
	return &aclRun{owner: s, t: t}, p, nil
}

func (r *aclRun) close(ctx context.Context) { _ = r.owner.Revoke(context.WithoutCancel(ctx)) }

// entries reads the key's entries back.
func (r *aclRun) entries(ctx context.Context) ([]api.ACLEntry, error) {
	es, err := r.owner.ACLGet(ctx, r.t.ttag)
	if err != nil {
		return nil, fmt.Errorf("acl: read the %s %s's entries: %w", r.t.kind, r.t.name, err)
	}
	return es, nil
}

func entryOf(es []api.ACLEntry, p *api.Principal) *api.ACLEntry {
	for i := range es {
		if es[i].SystemID == p.SystemID && es[i].PrincipalID == p.PrincipalID {
			return &es[i]
		}
	}
	return nil
}

func report(action string, t aclTarget, es []api.ACLEntry) *ACLReport {
	r := &ACLReport{Action: action, Kind: t.kind, Name: t.name, Entries: []ACLEntry{}}
	for _, e := range es {
		r.Entries = append(r.Entries, ACLEntry{Principal: e.Principal, SystemID: e.SystemID, PrincipalID: e.PrincipalID,
			Rights: sortRights(e.Rights), EndTime: e.EndTime, Uses: e.Uses})
	}
	return r
}

// startACL is what every acl action does first: name the key and its
// owner, sign in, look the principal up, open the owner's session on the
// key and read its entries. The caller closes the run.
func startACL(ctx context.Context, o ACLOptions, action string) (aclTarget, *aclRun, *api.Principal, []api.ACLEntry, error) {
	t, owner, err := o.resolve(action)
	if err != nil {
		return aclTarget{}, nil, nil, nil, err
	}
	r, p, err := openACL(ctx, &o, t, owner)
	if err != nil {
		return aclTarget{}, nil, nil, nil, err
	}
	es, err := r.entries(ctx)
	if err != nil {
		r.close(ctx)
		return aclTarget{}, nil, nil, nil, err
	}
	return t, r, p, es, nil
}

// ACLList reads the entries of the key the options name, as its owner.
// With a principal named, the report names its ids and what it holds
// (Before and After alike), whether or not it has an entry.
func ACLList(ctx context.Context, o ACLOptions) (*ACLReport, error) {
	t, r, p, es, err := startACL(ctx, o, "list")
	if err != nil {
		return nil, err
	}
	defer r.close(ctx)
	rep := report("list", t, es)
	if p != nil {
		rep.Principal, rep.SystemID, rep.PrincipalID = p.Name, p.SystemID, p.PrincipalID
		rep.Before, rep.After = []string{}, []string{}
		if e := entryOf(es, p); e != nil {
			rep.Before, rep.After = sortRights(e.Rights), sortRights(e.Rights)
		}
	}
	return rep, nil
}

// ACLGrant adds the rights to the principal's entry on the key (making the
// entry when there is none), as the key's owner, and reads it back. An
// entry that already holds them is left as it is and nothing is sent. An
// entry with an end time or a use count (a hand-off step's) is not widened:
// granting over it would make it permanent.
func ACLGrant(ctx context.Context, o ACLOptions) (*ACLReport, error) {
	t, r, p, es, err := startACL(ctx, o, "grant")
	if err != nil {
		return nil, err
	}
	defer r.close(ctx)
	old := entryOf(es, p)
	var before []string
	if old != nil {
		before = sortRights(old.Rights)
		if slices.Contains(before, api.RightOwner) {
			return nil, aclRefused("%s holds OWNER on the %s %s's key; pdmcp acl leaves an owner's entry alone", p.Name, t.kind, t.name)
		}
		if old.EndTime != nil || old.Uses != nil {
			return nil, aclRefused("%s holds a bounded entry on the %s %s's key (%s), probably a hand-off step's: close the step (pdmcp close-step) or revoke the entry first",
				p.Name, t.kind, t.name, bounds(old))
		}
	}
	after := sortRights(append(slices.Clone(before), o.Rights...))
	rep := &ACLReport{Principal: p.Name, Before: before, After: after}
	req := api.ACLGrantRequest{TTag: t.ttag, SystemID: p.SystemID, PrincipalID: p.PrincipalID, Rights: after}
	switch {
	case old == nil:
		err = r.owner.ACLGrant(ctx, req)
		rep.Changed = true
	case !slices.Equal(before, after):
		err = r.owner.ACLUpdate(ctx, req)
		rep.Changed = true
	}
	if err != nil {
		return nil, fmt.Errorf("acl: grant %s to %s on the %s %s: %w", strings.Join(o.Rights, ","), p.Name, t.kind, t.name, err)
	}
	return r.readBack(ctx, "grant", p, rep)
}

// ACLRevoke takes the rights (all of them, the whole entry, when none are
// named) from the principal's entry on the key, as the key's owner, and
// reads it back. A principal without an entry, or without those rights,
// is left as it is and nothing is sent: revoking is safe to repeat.
func ACLRevoke(ctx context.Context, o ACLOptions) (*ACLReport, error) {
	t, r, p, es, err := startACL(ctx, o, "revoke")
	if err != nil {
		return nil, err
	}
	defer r.close(ctx)
	rep := &ACLReport{Principal: p.Name}
	old := entryOf(es, p)
	if old == nil {
		return r.readBack(ctx, "revoke", p, rep)
	}
	rep.Before = sortRights(old.Rights)
	if slices.Contains(rep.Before, api.RightOwner) {
		return nil, aclRefused("%s holds OWNER on the %s %s's key; pdmcp acl leaves an owner's entry alone", p.Name, t.kind, t.name)
	}
	rep.After = []string{}
	if len(o.Rights) > 0 {
		rep.After = slices.DeleteFunc(slices.Clone(rep.Before), func(r string) bool { return slices.Contains(o.Rights, r) })
	}
	switch {
	case len(rep.After) == 0:
		err = r.owner.ACLRevoke(ctx, api.ACLRevokeRequest{TTag: t.ttag, SystemID: p.SystemID, PrincipalID: p.PrincipalID})
		rep.Changed = true
	case !slices.Equal(rep.Before, rep.After):
		// The rest of the entry, its bounds included, stays as it was.
		err = r.owner.ACLUpdate(ctx, api.ACLGrantRequest{TTag: t.ttag, SystemID: p.SystemID, PrincipalID: p.PrincipalID,
			Rights: rep.After, EndTime: old.EndTime, Uses: old.Uses})
		rep.Changed = true
	}
	if err != nil {
		return nil, fmt.Errorf("acl: revoke from %s on the %s %s: %w", p.Name, t.kind, t.name, err)
	}
	return r.readBack(ctx, "revoke", p, rep)
}

// readBack reads the key's entries after a change and checks that the
// principal's entry holds exactly rep.After (no entry when After is empty).
func (r *aclRun) readBack(ctx context.Context, action string, p *api.Principal, rep *ACLReport) (*ACLReport, error) {
	es, err := r.entries(ctx)
	if err != nil {
		return nil, err
	}
	got := entryOf(es, p)
	var have []string
	if got != nil {
		have = sortRights(got.Rights)
	}
	if !slices.Equal(have, rep.After) && !(len(have) == 0 && len(rep.After) == 0) {
		return nil, fmt.Errorf("acl: %s's entry on the %s %s reads back as %s, not %s", p.Name, r.t.kind, r.t.name,
			rightsText(have), rightsText(rep.After))
	}
	out := report(action, r.t, es)
	out.Principal, out.Before, out.After, out.Changed = rep.Principal, rep.Before, rep.After, rep.Changed
	out.SystemID, out.PrincipalID = p.SystemID, p.PrincipalID
	if out.After == nil {
		out.After = []string{}
	}
	return out, nil
}

func bounds(e *api.ACLEntry) string {
	var parts []string
	if e.EndTime != nil {
		parts = append(parts, "ends "+e.EndTime.UTC().Format(time.RFC3339))
	}
	if e.Uses != nil {
		parts = append(parts, strconv.Itoa(*e.Uses)+" uses left")
	}
	return strings.Join(parts, ", ")
}

func rightsText(rs []string) string {
	if len(rs) == 0 {
		return "none"
	}
	return strings.Join(rs, ",")
}

// WriteText prints the report for a person: what changed, then the key's
// entries as read back, then the command's OK line. Never a t-Tag.
func (r *ACLReport) WriteText(w io.Writer) {
	switch r.Action {
	case "grant", "revoke":
		what := "unchanged"
		if r.Changed {
			what = "changed"
		}
		fmt.Fprintf(w, "%s %s: %s %s -> %s (%s; read back)\n", r.Kind, r.Name, r.Principal, rightsText(r.Before), rightsText(r.After), what)
	case "list":
		if r.Principal != "" {
			fmt.Fprintf(w, "%s %s: %s holds %s\n", r.Kind, r.Name, r.Principal, rightsText(r.After))
		}
	}
	if r.Principal != "" {
		fmt.Fprintf(w, "principal %s: systemId %d, principalId %s\n", r.Principal, r.SystemID, r.PrincipalID)
	}
	fmt.Fprintf(w, "entries on the key of %s %s:\n", r.Kind, r.Name)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PRINCIPAL\tSYSTEM ID\tPRINCIPAL ID\tRIGHTS\tBOUNDS")
	for _, e := range r.Entries {
		name := e.Principal
		if name == "" {
			name = "(not named)"
		}
		b := bounds(&api.ACLEntry{EndTime: e.EndTime, Uses: e.Uses})
		if b == "" {
			b = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", name, e.SystemID, e.PrincipalID, rightsText(e.Rights), b)
	}
	tw.Flush()
	fmt.Fprintf(w, "ACL %s: OK\n", strings.ToUpper(r.Action))
}
