package noanswer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
)

func TestError(t *testing.T) {
	const u = "https://gateway.example:8443/v1/sessions"
	addr := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 8443}
	refused := &url.Error{Op: "Post", URL: u, Err: &net.OpError{Op: "dial", Net: "tcp", Addr: addr,
		Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"connection refused", refused, "the Gateway at " + u + " did not answer: nothing listens at 10.0.0.1:8443 (ECONNREFUSED)"},
		{"refused, no address", fmt.Errorf("x: %w", syscall.ECONNREFUSED), "the Gateway at " + u + " did not answer: nothing listens at that address (ECONNREFUSED)"},
		{"no such host", &url.Error{Op: "Get", URL: u, Err: &net.DNSError{Err: "no such host", Name: "gateway.example", IsNotFound: true}},
			"the Gateway at " + u + " did not answer: lookup gateway.example: no such host"},
		{"deadline", &url.Error{Op: "Post", URL: u, Err: context.DeadlineExceeded}, "the Gateway at " + u + " did not answer: no answer in the time allowed"},
		{"cancelled", fmt.Errorf("send: %w", context.Canceled), "the Gateway at " + u + " did not answer: the request was cancelled before an answer came"},
		{"other", errors.New("EOF"), "the Gateway at " + u + " did not answer: EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := &Error{Peer: "the Gateway", URL: u, Err: tt.err}
			if err.Error() != tt.want {
				t.Errorf("got  %s\nwant %s", err, tt.want)
			}
			if !errors.Is(err, tt.err) {
				t.Error("the cause does not match")
			}
		})
	}
}
