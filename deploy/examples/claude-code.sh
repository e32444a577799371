#!/bin/sh
# Connect Claude Code to pdmcp served over Streamable HTTP (pdmcp serve
# --transport http). Run it as the user whose Claude Code should use the
# server. See docs/hosts.md.
#
# --client-id is the hosts' public client at the OpenID provider (mcp-host
# in deploy/keycloak/realm-pdmcp.json) and --callback-port the fixed port of
# its loopback redirect: the provider must list
# http://localhost:18124/callback and http://127.0.0.1:18124/callback for
# that client, or it refuses the sign-in.
#
# Claude Code runs on Node. When the server's certificate, or the
# provider's, comes from your own CA, every claude process that connects
# (the `claude mcp list` below, and claude itself) needs
# NODE_EXTRA_CA_CERTS naming a PEM file that holds both CAs (never the
# server's own certificate). Export it in the shell that runs this script
# and claude, or in your shell profile:
#
#   export NODE_EXTRA_CA_CERTS=$HOME/.config/pdmcp/host-cas.pem
#   sh claude-code.sh
#   claude
#
# Then, inside Claude Code, /mcp -> protected-documents -> Authenticate.
set -eu

MCP_URL="${MCP_URL:-https://127.0.0.1:8443/mcp}"

claude mcp add --transport http --client-id mcp-host --callback-port 18124 \
    protected-documents "$MCP_URL"

# Before the first sign-in this lists the server as needing authentication.
claude mcp list
