package operator

import (
	"log/slog"

	"github.com/pdmcp/pdmcp/gateway"
)

// clientConfig is the Config of a client acting as the service sc, logging
// each Gateway request to l (the command's logger; nil discards), so that
// an operator command's -v or --log-level debug shows what it asked.
func clientConfig(sc *gateway.ServiceConfig, l *slog.Logger) gateway.Config {
	cc := sc.ClientConfig()
	cc.Logger = l
	return cc
}
