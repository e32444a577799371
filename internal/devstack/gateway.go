package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/pdmcp/pdmcp/auth/devpki"
	"github.com/pdmcp/pdmcp/internal/stack"
)

// GatewayInfo is where a standalone development Gateway serves.
type GatewayInfo struct {
	URL          string
	CAFile       string
	PasswordFile string
}

// RunGateway runs the reference Gateway and key server alone from the
// state folder (pdmcp dev gateway) until ctx ends, holding the folder's
// lock. It keeps its port across restarts, since a config.json that
// bootstrap wrote names it: the port is port when not 0, else the one the
// last run served on (ports.json's gateway), else any free one; and a port
// that is taken is an error, never a silent move to another.
func RunGateway(ctx context.Context, state string, port int, log *slog.Logger, ready func(GatewayInfo)) error {
	release, err := LockState(state)
	if err != nil {
		return err
	}
	defer release()
	portsFile := filepath.Join(state, "ports.json")
	var ports Ports
	if b, err := os.ReadFile(portsFile); err == nil {
		if err := json.Unmarshal(b, &ports); err != nil {
			return fmt.Errorf("%s: %w", portsFile, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	remembered := port == 0 && ports.Gateway != 0
	if port == 0 {
		port = ports.Gateway
	}
	ca, err := devpki.LoadOrCreateCA(filepath.Join(state, "ca"), "pdmcp dev")
	if err != nil {
		return err
	}
	srv, pwFile, err := stack.ServeGatewayOn(ctx, state, ca, port, log)
	if errors.Is(err, stack.ErrPortInUse) {
		if remembered {
			return fmt.Errorf("the Gateway's port %d (the last run's, in %s, which config.json files bootstrapped against it name) is taken: stop what listens there, or choose another with --port and change those config.json files: %w",
				port, portsFile, err)
		}
		return fmt.Errorf("--port %d is taken: stop what listens there, or choose another: %w", port, err)
	}
	if err != nil {
		return err
	}
	ports.Gateway = portOf(srv.URL)
	if err := stack.WriteJSON(portsFile, ports); err != nil {
		_ = srv.Close()
		return fmt.Errorf("remember the Gateway's port: %w", err)
	}
	if ready != nil {
		ready(GatewayInfo{URL: srv.URL, CAFile: ca.CertPEM, PasswordFile: pwFile})
	}
	<-ctx.Done()
	return srv.Close()
}
