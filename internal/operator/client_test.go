package operator

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/pdmcp/pdmcp/gateway/api"
)

// TestGatewayWords: a Gateway that did not answer is worded so, never as a
// refusal, keeping the context around it and the error it words; any
// other error is left as it is.
func TestGatewayWords(t *testing.T) {
	unreachable := &api.Error{Layer: api.LayerGateway, Code: api.CodeUnreachable, Detail: "the Gateway could not be reached",
		Cause: fmt.Errorf("dial tcp 127.0.0.1:1: %w", syscall.ECONNREFUSED)}
	dialed := &api.Error{Layer: api.LayerGateway, Code: api.CodeUnreachable, Detail: "the Gateway could not be reached",
		Cause: &url.Error{Op: "Post", URL: "https://gw/v1/x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("connect: %w", syscall.ECONNREFUSED)}}}
	bad := &api.Error{Layer: api.LayerGateway, Code: api.CodeBadResponse, Detail: "not JSON"}
	refusal := &api.Error{Layer: api.LayerGateway, Code: api.CodeNotFound, Status: 404, Detail: "no such principal"}
	for _, tc := range []struct {
		name string
		err  error
		hint string
		want string
	}{
		{"at the end", fmt.Errorf("seed: sign in: %w", unreachable), "",
			"seed: sign in: the Gateway at https://gw did not answer: dial tcp 127.0.0.1:1: connection refused"},
		{"inside", fmt.Errorf("protect d: %w; rerun to continue", unreachable), "",
			"protect d: the Gateway at https://gw did not answer: dial tcp 127.0.0.1:1: connection refused; rerun to continue"},
		{"with a hint", fmt.Errorf("bootstrap: %w", unreachable), "nothing was generated",
			"bootstrap: the Gateway at https://gw did not answer: dial tcp 127.0.0.1:1: connection refused; nothing was generated"},
		{"bad response", fmt.Errorf("acl: %w", bad), "", "acl: the Gateway at https://gw did not answer as a Gateway does: not JSON"},
		{"a dial error", fmt.Errorf("seed: %w", dialed), "", "seed: the Gateway at https://gw did not answer: connect: connection refused"},
		{"a refusal", fmt.Errorf("acl: %w", refusal), "", fmt.Errorf("acl: %w", refusal).Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := GatewayWords("https://gw", tc.err, tc.hint)
			if got.Error() != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
			var ae *api.Error
			if !errors.As(got, &ae) {
				t.Fatal("the api.Error is lost")
			}
		})
	}
	if GatewayWords("https://gw", nil, "") != nil {
		t.Fatal("nil is not nil")
	}
}
