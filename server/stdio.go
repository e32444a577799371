package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pdmcp/pdmcp/audit"
	"github.com/pdmcp/pdmcp/gateway"
	"github.com/pdmcp/pdmcp/grant"
	"github.com/pdmcp/pdmcp/server/journal"
)

// StdioOptions are `pdmcp serve`'s inputs for one user over stdio.
type StdioOptions struct {
	ConfigPath   string // config.json (the registered service)
	ManifestPath string
	GrantPath    string
	AuditPath    string
	JournalPath  string // default: <manifest>.journal.sqlite
	Version      string
	Environ      []string // checked for model credentials
	Logger       *slog.Logger
	Now          func() time.Time
	CrashPoint   func(string)
	// Transport defaults to the process's stdin and stdout.
	Transport mcp.Transport
}

// RunStdio serves one grant over stdio until the host closes stdin or ctx
// ends (SIGTERM, SIGINT); either way the task's Gateway session is revoked
// before it returns.
func RunStdio(ctx context.Context, o StdioOptions) error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := CheckEnvironment(o.Environ); err != nil {
		return err
	}
	sc, err := gateway.LoadServiceConfig(o.ConfigPath)
	if err != nil {
		return err
	}
	g, err := grant.Load(o.GrantPath)
	if err != nil {
		return err
	}
	if g.LocalUser == "" {
		return errors.New("this grant names no local user (it was written with --caller-identity for HTTP); " +
			"over stdio write the grant with --local-user")
	}
	m, err := grant.LoadManifest(o.ManifestPath)
	if err != nil {
		return err
	}
	if err := grant.Validate(g, m); err != nil {
		return err
	}
	if g.Expired(o.Now()) {
		return fmt.Errorf("the grant ended at %s; write a new one with `pdmcp grant`", g.NotAfter.UTC().Format(time.RFC3339))
	}
	jpath := o.JournalPath
	if jpath == "" {
		jpath = journal.DefaultPath(o.ManifestPath)
	}
	j, err := journal.Open(ctx, jpath)
	if err != nil {
		return err
	}
	defer j.Close()
	a, err := audit.Open(o.AuditPath)
	if err != nil {
		return err
	}
	defer a.Close()

	cc := sc.ClientConfig()
	cc.Logger = o.Logger
	client, err := gateway.New(cc)
	if err != nil {
		return err
	}
	if err := client.SignIn(ctx); err != nil {
		return fmt.Errorf("service sign-in: %w", err)
	}
	sessions := NewGrantSessions(client, g.LocalUser, grant.Keys(g, m), g.NotAfter, o.Now, o.Logger)
	defer sessions.EndAll(context.WithoutCancel(ctx))

	srv, err := New(Config{
		Grant: g, Manifest: m, ManifestPath: o.ManifestPath, Journal: j, Audit: a, Sessions: sessions,
		Version: o.Version, RunID: newRunID(), Now: o.Now, Logger: o.Logger, CrashPoint: o.CrashPoint,
	})
	if err != nil {
		return err
	}
	t := o.Transport
	if t == nil {
		t = &mcp.StdioTransport{}
	}
	o.Logger.Info("serving over stdio", "grant", g.ID, "tools", len(g.AllowedTools), "notAfter", g.NotAfter.UTC().Format(time.RFC3339))
	err = srv.MCP().Run(ctx, t)
	if ctx.Err() != nil {
		// Ended by a signal: that is a normal stop.
		return nil
	}
	return err
}

func newRunID() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "run-unknown"
	}
	return hex.EncodeToString(b)
}
