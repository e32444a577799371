package main

import (
	"errors"
	"io/fs"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/pdmcp/pdmcp/internal/serve"
)

// crashEnv names the test hook that kills the server at one step of a save
// (see server.Config.CrashPoint). It exists for the crash-recovery tests.
const crashEnv = "PDMCP_TEST_KILL_AT"

// startRefused is the error of a start check (serve.CheckStart) that
// refused the files named: a file that is not there is a wrong command
// line (exit 2); anything else does not hold (exit 3).
func startRefused(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return refusedError(err)
}

func newServeCmd() *cobra.Command {
	var o serve.Options
	var transport string
	cmd := command("serve", "Serve the grant's tools to an MCP host (stdio, or Streamable HTTP over TLS)", func(cmd *cobra.Command) error {
		switch {
		case transport != "http" && transport != "stdio":
			return usageError("pdmcp serve: --transport %q: use stdio or http", transport)
		case transport == "http" && o.HTTPConfigPath == "":
			return usageError("pdmcp serve: --transport http needs --http-config mcp-http.json (the listener's address, certificate and provider)")
		case transport == "stdio" && o.HTTPConfigPath != "":
			return usageError("pdmcp serve: --http-config %s is for --transport http; add --transport http, or leave --http-config out for stdio", o.HTTPConfigPath)
		}
		// The files' checks first, so that what does not hold (an ended
		// grant, a local user outside the prefix) is a refusal (exit 3),
		// as host-config reports it, not a failure while serving.
		if err := serve.CheckStart(serve.StartFiles{ConfigPath: o.ConfigPath, ManifestPath: o.ManifestPath, GrantPath: o.GrantPath},
			transport == "http", time.Now()); err != nil {
			return startRefused(err)
		}
		o.Version = versionString()
		o.Environ = os.Environ()
		o.Logger = loggerFrom(cmd.Context())
		o.CrashPoint = killAtHook()
		// SIGHUP (logrotate's kill -HUP, a closed terminal) reopens the
		// audit file instead of ending the process without the revoke.
		hangup := make(chan os.Signal, 1)
		signal.Notify(hangup, syscall.SIGHUP)
		defer signal.Stop(hangup)
		o.Hangup = hangup
		return serve.Run(cmd.Context(), o)
	})
	cmd.Long = `serve serves the grant's tools to one MCP host over stdio (the host starts it, usually through
clean-env: see pdmcp host-config), or to many callers over Streamable HTTP with TLS on 127.0.0.1
(--transport http, with mcp-http.json naming the listener, its certificate and the OpenID provider).
It first makes the start checks host-config makes: a grant that has ended, a local user outside the
service's prefix, a grant that does not fit the manifest are refused (exit 3) before it signs in.
It logs to standard error (--log-level, --log-format) and runs until its host closes stdio, or
SIGINT/SIGTERM; SIGHUP reopens the audit file (after logrotate).`
	cmd.Example = `  pdmcp serve --config config.json --manifest task/manifest.json --grant task/grant.json --audit task/audit.jsonl
  pdmcp serve --transport http --http-config mcp-http.json --config config.json --manifest task/manifest.json \
    --grant task/grant.json --audit task/audit.jsonl --ops-addr 127.0.0.1:9464 --log-format json`
	f := cmd.Flags()
	f.StringVar(&transport, "transport", "stdio", "stdio, or http (Streamable HTTP over TLS on 127.0.0.1)")
	f.StringVar(&o.HTTPConfigPath, "http-config", "", "mcp-http.json, for --transport http")
	f.StringVar(&o.ConfigPath, "config", "", "the service's config.json from pdmcp bootstrap")
	f.StringVar(&o.ManifestPath, "manifest", "", "the operator's manifest.json")
	f.StringVar(&o.GrantPath, "grant", "", "the task grant, grant.json from pdmcp grant")
	f.StringVar(&o.AuditPath, "audit", "", "the audit file, appended (mode 600)")
	f.StringVar(&o.AuditKeyPath, "audit-key", "", "an Ed25519 private key (PKCS #8 PEM, mode 600) to sign the audit chain's head with (off when empty)")
	f.StringVar(&o.OpsAddr, "ops-addr", "", "serve /healthz and /metrics on this loopback address (off when empty)")
	f.StringVar(&o.JournalPath, "journal", "", "the journal (default <manifest>.journal.sqlite)")
	_ = cmd.RegisterFlagCompletionFunc("transport", completeWords("stdio", "http"))
	completeFiles(cmd, "json", "config", "manifest", "grant", "http-config")
	completeFiles(cmd, "", "audit", "audit-key", "journal")
	return requireFlags(cmd, "config", "manifest", "grant", "audit")
}
