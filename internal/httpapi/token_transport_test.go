package httpapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"github.com/gpuaas/gpuaas/internal/store"
)

// A Go client whose transport is a TokenSource's calls as the service
// account, minting its token on the first request; a key the server does
// not know fails each request with the exchange's error, and nothing is
// sent without a token.
func TestTokenSourceTransport(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, store.SQLite)
	sa := s.Admin().Do("POST", "/api/v1/projects/"+s.Creds.ProjectID+"/service-accounts",
		map[string]any{"name": "ci", "slug": "ci", "roles": []string{"project_viewer"}}).Want(t, 201)
	key := client.KeyFile{Type: client.KeyFileType, ServiceAccountID: sa.String("id"), KeyID: sa.String("key_id"),
		PrivateKeyPEM: sa.String("private_key_pem"), TokenURL: sa.String("token_url")}
	c := client.New(s.URL, "")
	c.HTTP.Transport = client.NewTokenSource(client.New(s.URL, ""), key).Transport(nil)
	for range 2 {
		me, err := c.Me(context.Background())
		if err != nil || me.Type != "service_account" || me.ID != key.ServiceAccountID {
			t.Fatalf("me through the token transport: %v %+v", err, me)
		}
	}
	bad := key
	bad.KeyID = "01a21d00-0000-7000-8000-000000000000"
	c.HTTP.Transport = client.NewTokenSource(client.New(s.URL, ""), bad).Transport(nil)
	if _, err := c.Me(context.Background()); err == nil || !strings.Contains(err.Error(), "service-account token") {
		t.Fatalf("an unknown key: %v", err)
	}
}
