package api

import (
	"errors"
	"testing"
)

// TestErrorText: a refusal says who refused; a Gateway that did not answer,
// or whose answer could not be read, is not said to have refused.
func TestErrorText(t *testing.T) {
	const u = "https://gateway.example:8443/api/v1/auth/service"
	tests := []struct {
		name string
		err  *Error
		want string
	}{
		{"a refusal", &Error{Layer: LayerGateway, Code: "SESSION_MISSING", Status: 401, Detail: "sign in again"},
			"gateway refused SESSION_MISSING (401): sign in again"},
		{"no answer, with its cause", &Error{Layer: LayerGateway, Code: CodeUnreachable, URL: u, Detail: "d",
			Cause: errors.New("the Gateway at " + u + " did not answer: EOF")},
			"the Gateway at " + u + " did not answer: EOF (GATEWAY_UNREACHABLE)"},
		{"no answer, no cause", &Error{Layer: LayerGateway, Code: CodeUnreachable, URL: u, Detail: "try again later"},
			"the Gateway at " + u + " did not answer: try again later (GATEWAY_UNREACHABLE)"},
		{"no answer, nowhere named", &Error{Layer: LayerGateway, Code: CodeUnreachable, Detail: "try again later"},
			"the Gateway did not answer: try again later (GATEWAY_UNREACHABLE)"},
		{"an unreadable answer", &Error{Layer: LayerGateway, Code: CodeBadResponse, Status: 502, URL: u, Detail: "d",
			Cause: errors.New("answer is not JSON")},
			"the Gateway at " + u + " answered HTTP 502 in a form this client cannot read: answer is not JSON (GATEWAY_BAD_RESPONSE)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}
