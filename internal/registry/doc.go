// Package registry embeds a CNCF distribution (v3) OCI registry in the
// control plane and issues Docker registry tokens for it.
//
// # Mounting
//
// [Registry.Handler] serves the whole registry surface and must be mounted
// at "/v2/" on the control plane's own listener (the same host:port as the
// REST API):
//
//	mux.Handle("/v2/", reg.Handler())
//
// It answers
//
//   - GET /v2/token — the Docker token endpoint ([TokenHandler]); HTTP Basic
//     credentials are checked by the control plane's [Authorizer].
//   - /v2/... — the OCI distribution API (blobs, manifests, tags, uploads,
//     deletes), which only accepts bearer tokens minted by /v2/token.
//
// The token realm lives on the same listener on purpose: current
// go-containerregistry clients refuse a realm on another loopback port.
//
// # Modes
//
// Embedded (Config.ExternalURL empty): filesystem storage under
// Config.RootDir, token auth whose verification keys are the [KeySet].
//
// External (Config.ExternalURL set): no registry runs in-process;
// Handler only serves /v2/token and the control-plane [Client] talks to the
// external registry over HTTP with a pull token it mints for itself. The
// external registry (any distribution-compatible registry with Docker token
// auth, for example distribution itself) must trust this token issuer:
//
//	auth:
//	  token:
//	    realm: https://<control-plane-host>/v2/token
//	    service: <Config.Service, by default the registry's host:port>
//	    issuer: gpuaas            # Config.Issuer
//	    jwks: /etc/registry/gpuaas-jwks.json   # Registry.JWKS()
//
// # Keys and rotation
//
// Tokens are signed by the KeySet's signing key (Ed25519 or ECDSA P-256) and
// carry its "kid" (the RFC 7638 thumbprint). The registry trusts every key in
// the set, so a rotation is: make the new key the signing key, keep the old
// public key in KeySet as verification-only for at least one token TTL, then
// drop it. Registry.SetKeys swaps the set while the registry runs; the
// embedded registry trusts the new set from the next request (an external
// registry reads its JWKS file as it was configured).
package registry
