package devidp_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"

	"github.com/pdmcp/pdmcp/auth/devidp"
)

// A provider on a TLS test server, and a user's token obtained the way a
// script signs in.
func Example() {
	ctx := context.Background()
	srv := httptest.NewUnstartedServer(nil) // the listener exists, so the issuer is known
	defer srv.Close()
	p, err := devidp.New(ctx, devidp.Config{
		Issuer: "https://" + srv.Listener.Addr().String(),
		Users:  []devidp.User{{Username: "alice", Password: "alice-password", Subject: "alice-1"}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	srv.Config.Handler = p
	srv.StartTLS()

	tok, err := devidp.Login(ctx, srv.Client(), devidp.LoginParams{
		Issuer:      p.Issuer(),
		ClientID:    p.HostClientID(),
		RedirectURL: "http://localhost:18124/callback", // nothing listens there
		Username:    "alice",
		Password:    "alice-password",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// The host client gets a refresh token without asking for offline_access.
	fmt.Println(tok.TokenType, tok.RefreshToken != "", tok.Extra("id_token") != nil)
	// Output: Bearer true true
}
