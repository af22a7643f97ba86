package cli

import (
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/signature"
	"github.com/spf13/cobra"
)

// Signing from the CLI: `artifact keygen` makes a key pair offline, a project
// admin registers its public half with `artifact signing-key add`, and
// `artifact push --sign-key` signs (and, when the intent asks, attests SLSA
// provenance for) the pushed digest in the cosign layout that `artifact
// verify` checks.

// provenanceBuilderID is the SLSA builder.id of provenance the CLI writes.
const provenanceBuilderID = "gpuaas-cli"

// provenanceBuildType is the SLSA buildType of `gpuaas artifact push`.
const provenanceBuildType = "https://github.com/gpuaas/gpuaas/cli/artifact-push/v1"

func newArtifactKeygenCmd() *cobra.Command {
	var out, alg string
	c := &cobra.Command{
		Use:   "keygen --out PREFIX",
		Short: "Create a signing key pair: PREFIX.key (private, mode 0600) and PREFIX.pub",
		Long: `Offline. The private key is an unencrypted PKCS#8 PEM for gpuaas artifact push --sign-key
(cosign import-key-pair converts it for cosign); the public key is the PEM that
gpuaas artifact signing-key add registers and cosign verify --key reads.
Existing files are never overwritten.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out is required: the key pair is written to PREFIX.key and PREFIX.pub")
			}
			a := signature.Algorithm(alg)
			if a != signature.AlgEd25519 && a != signature.AlgECDSAP256 {
				return fmt.Errorf("--algorithm %q: want %s or %s", alg, signature.AlgECDSAP256, signature.AlgEd25519)
			}
			keyPath, pubPath := out+".key", out+".pub"
			for _, p := range []string{keyPath, pubPath} {
				if _, err := os.Lstat(p); err == nil {
					return fmt.Errorf("%s exists; keys are never overwritten: pick another --out", p)
				} else if !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
			priv, pub, err := signature.GenerateKeyPair(a)
			if err != nil {
				return err
			}
			if err := writeNewFile(keyPath, priv, 0o600); err != nil {
				return err
			}
			if err := writeNewFile(pubPath, pub, 0o644); err != nil {
				_ = os.Remove(keyPath)
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "private key %s (mode 0600: keep it secret), public key %s\n"+
				"A project admin registers it with: gpuaas artifact signing-key add --name NAME --public-key-file %s\n", keyPath, pubPath, pubPath)
			if table, err := tableFormat(cmd, false); err != nil || !table {
				if err != nil {
					return err
				}
				return printResult(cmd, map[string]string{"private_key_file": keyPath, "public_key_file": pubPath, "algorithm": string(a)})
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), pubPath)
			return err
		},
	}
	c.Flags().StringVar(&out, "out", "", "path prefix of the key files (PREFIX.key, PREFIX.pub)")
	c.Flags().StringVar(&alg, "algorithm", string(signature.AlgECDSAP256), "ecdsa-p256 (cosign's default) or ed25519")
	return c
}

// writeNewFile creates path with mode and writes b; it fails if path exists
// and removes what it created on a failed write.
func writeNewFile(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists; keys are never overwritten: pick another --out", path)
	}
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func newSigningKeyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "signing-key",
		Short: "The project's registered signing public keys, which artifact verify checks signatures against",
	}
	var keyName, pubFile string
	add := &cobra.Command{
		Use:   "add --name NAME --public-key-file FILE",
		Short: "Register a signing public key (PEM: ECDSA P-256, Ed25519 or RSA >= 2048; project admin)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyName == "" || pubFile == "" {
				return errors.New("--name and --public-key-file are required")
			}
			b, err := os.ReadFile(pubFile)
			if err != nil {
				return err
			}
			if _, err := signature.ParsePublicKeyPEM(b); err != nil {
				return fmt.Errorf("%s is not a usable public key (%w); pass the .pub file of gpuaas artifact keygen or cosign generate-key-pair", pubFile, err)
			}
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			k, err := api.CreateSigningKey(cmd.Context(), pid, keyName, string(b))
			if err != nil {
				return err
			}
			return printJSON(cmd, k)
		},
	}
	add.Flags().StringVar(&keyName, "name", "", "key name, unique in the project (e.g. ci-release)")
	add.Flags().StringVar(&pubFile, "public-key-file", "", "PEM public key file")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the project's signing keys",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			keys, err := api.ListSigningKeys(cmd.Context(), pid)
			if err != nil {
				return err
			}
			if keys == nil {
				keys = []client.ArtifactSigningKey{}
			}
			return printJSON(cmd, map[string]any{"items": keys})
		},
	}
	cmd.AddCommand(add, list)
	return cmd
}

// imageSigner signs what `artifact push --sign-key` pushed.
type imageSigner struct {
	path   string
	signer crypto.Signer
	// keyID is the registered key id recorded in the signature (a hint for
	// humans; verification tries every registered key). Empty if unknown.
	keyID string
	// registered reports that the public half is one of the project's keys
	// (looked up only when --key-id is not given).
	registered bool
}

// loadImageSigner reads a PEM private key. It runs before a publish intent
// is asked for: a wrong key file must not mint publish credentials.
func loadImageSigner(path string) (*imageSigner, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--sign-key: %w", err)
	}
	s, err := signature.ParsePrivateKeyPEM(b)
	if err != nil {
		return nil, fmt.Errorf("--sign-key %s is not a usable private key (%w); pass the .key file of gpuaas artifact keygen (an unencrypted PEM private key)", path, err)
	}
	return &imageSigner{path: path, signer: s}, nil
}

// registeredKeyID returns the id of the key in keys whose public half is pub
// ("" and false when none is).
func registeredKeyID(keys []client.ArtifactSigningKey, pub crypto.PublicKey) (string, bool) {
	eq, ok := pub.(interface{ Equal(crypto.PublicKey) bool })
	if !ok {
		return "", false
	}
	for _, k := range keys {
		p, err := signature.ParsePublicKeyPEM([]byte(k.PublicKey))
		if err == nil && eq.Equal(p) {
			return k.ID, true
		}
	}
	return "", false
}

// resolveKeyID sets keyID to the id of the project key whose public half
// matches the signer's, and warns on w when there is none (verify would then
// fail). Failing to list the keys is not fatal: the signature then names no
// key id, and verification tries every registered key anyway.
func (s *imageSigner) resolveKeyID(ctx context.Context, w io.Writer, api *client.Client, projectID string) {
	keys, err := api.ListSigningKeys(ctx, projectID)
	if err != nil {
		fmt.Fprintf(w, "warning: could not list the project's signing keys (%v); the signature will not name a key id\n", err)
		return
	}
	s.keyID, s.registered = registeredKeyID(keys, s.signer.Public())
	if !s.registered {
		fmt.Fprintf(w, "warning: the public half of %s is not a signing key of project %s; artifact verify will fail until a project admin registers it (gpuaas artifact signing-key add)\n", s.path, projectID)
	}
}

// pushedImage is what signPushed signs.
type pushedImage struct {
	creds    client.RegistryCredentials
	digest   v1.Hash
	insecure bool
	intent   client.ArtifactIntent
	started  time.Time
	state    string // for errors: "pushed, not registered", or the artifact's id
}

// signPushed signs the pushed digest in its repository with the intent's
// credentials (push+pull on that repository) and, when the intent requires
// provenance, attaches a signed SLSA v1 provenance attestation.
func (s *imageSigner) signPushed(ctx context.Context, w io.Writer, p pushedImage) error {
	var nopts []name.Option
	if p.insecure {
		nopts = append(nopts, name.Insecure)
	}
	repo, err := name.NewRepository(p.creds.Registry+"/"+p.creds.Repository, nopts...)
	if err != nil {
		return err
	}
	ref, err := signature.NewRepoDigest(repo, p.digest.String())
	if err != nil {
		return err
	}
	opts := signature.Options{Remote: []remote.Option{
		remote.WithAuth(&authn.Basic{Username: p.creds.Username, Password: p.creds.Password}),
	}}
	// The same digest pushed again (under a new version, or signed before
	// with artifact sign) may already carry this key's signature, and the
	// signature tag of a verified digest can no longer be written: a valid
	// signature by this key is kept, not written again.
	verifier, err := signature.NewVerifier(signature.PublicKey{ID: s.path, Key: s.signer.Public()})
	if err != nil {
		return err
	}
	if _, err := verifier.VerifyImage(ctx, ref, opts); err == nil {
		fmt.Fprintf(w, "%s already carries a valid signature by %s; not signing it again\n", ref, s.path)
	} else {
		att, err := signature.SignImage(ctx, ref, s.signer, s.keyID, opts)
		if err != nil {
			return fmt.Errorf("sign %s (%s): %w", ref, p.state, err)
		}
		fmt.Fprintf(w, "signed %s -> %s\n", ref, att.Tag)
	}
	if !p.intent.ProvenanceRequired {
		return nil
	}
	if _, err := verifier.VerifyProvenance(ctx, ref, opts); err == nil {
		fmt.Fprintf(w, "%s already carries SLSA provenance signed by %s; not attesting it again\n", ref, s.path)
		return nil
	}
	body, err := provenancePredicate(p.intent, p.creds.Repository, p.started, time.Now())
	if err != nil {
		return err
	}
	att, err := signature.AttestProvenance(ctx, ref, s.signer,
		signature.Predicate{Type: signature.PredicateSLSAProvenanceV1, Body: body}, opts)
	if err != nil {
		return fmt.Errorf("attest provenance of %s (%s): %w", ref, p.state, err)
	}
	fmt.Fprintf(w, "attested SLSA provenance -> %s\n", att.Tag)
	return nil
}

// provenancePredicate is a minimal SLSA v1 provenance predicate of a CLI
// push (the subject, the image digest, is set by AttestProvenance).
func provenancePredicate(it client.ArtifactIntent, repository string, started, finished time.Time) (json.RawMessage, error) {
	type obj = map[string]any
	return json.Marshal(obj{
		"buildDefinition": obj{
			"buildType": provenanceBuildType,
			"externalParameters": obj{
				"app_slug": it.AppSlug, "app_version": it.AppVersion,
				"artifact_name": it.ArtifactName, "repository": repository,
			},
			"internalParameters": obj{"publish_intent_id": it.ID},
		},
		"runDetails": obj{
			"builder": obj{"id": provenanceBuilderID},
			"metadata": obj{
				"invocationId": it.ID,
				"startedOn":    started.UTC().Format(time.RFC3339),
				"finishedOn":   finished.UTC().Format(time.RFC3339),
			},
		},
	})
}

// newArtifactSignCmd signs a registered OCI artifact: for an image pushed
// without --sign-key, or signed by a key the project did not register.
func newArtifactSignCmd() *cobra.Command {
	var signKey, keyID string
	c := &cobra.Command{
		Use:   "sign ARTIFACT_ID|APP/VERSION/NAME --sign-key KEY",
		Short: "Sign a registered image's digest (and attach SLSA provenance when the artifact requires it)",
		Long: `Signs the artifact's digest in its repository, in the cosign layout artifact
verify checks, with a PEM private key (gpuaas artifact keygen); attaches signed
SLSA provenance when the artifact requires it. Write access to the repository
comes from a publish intent of the artifact's app, version and name. A valid
signature by the same key is kept, not written again. Then run gpuaas artifact verify.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if signKey == "" {
				return usageError{"--sign-key is required: the PEM private key (gpuaas artifact keygen) to sign with"}
			}
			signer, err := loadImageSigner(signKey)
			if err != nil {
				return err
			}
			ctx, errw := cmd.Context(), cmd.ErrOrStderr()
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			id, err := resolveArtifact(ctx, api, pid, args[0])
			if err != nil {
				return err
			}
			a, err := api.GetArtifact(ctx, pid, id)
			if err != nil {
				return err
			}
			if a.ArtifactKind != "oci" {
				return fmt.Errorf("artifact %s is a %s: only OCI images are signed (blobs are trusted by their sha256 digest)", a.ID, a.ArtifactKind)
			}
			d, err := v1.NewHash(a.Digest)
			if err != nil {
				return fmt.Errorf("artifact %s has no image digest to sign: %w", a.ID, err)
			}
			if cmd.Flags().Changed("key-id") {
				signer.keyID = keyID
			} else {
				signer.resolveKeyID(ctx, errw, api, pid)
			}
			it, err := api.CreatePublishIntent(ctx, pid, client.PublishIntentRequest{AppSlug: a.AppSlug, AppVersion: a.AppVersion,
				ArtifactName: a.ArtifactName, ArtifactKind: a.ArtifactKind, ProvenanceRequired: a.ProvenanceRequired})
			if err != nil {
				return err
			}
			creds, err := api.Unwrap(ctx, it.WrappedCredentials.WrappingToken)
			if err != nil {
				return err
			}
			if creds.Repository != a.Repository {
				return fmt.Errorf("artifact %s is in repository %s, but a publish intent of %s %s writes to %s: it cannot be signed from here", a.ID, a.Repository, a.AppSlug, a.AppVersion, creds.Repository)
			}
			err = signer.signPushed(ctx, errw, pushedImage{creds: creds, digest: d, insecure: strings.HasPrefix(api.BaseURL, "http://"),
				intent: it, started: time.Now(), state: "artifact " + a.ID})
			if err != nil {
				return err
			}
			fmt.Fprintf(errw, "next: gpuaas artifact verify %s\n", a.ID)
			return printResult(cmd, a, artifactFields...)
		},
	}
	c.Flags().StringVar(&signKey, "sign-key", "", "PEM private key (gpuaas artifact keygen) to sign with")
	c.Flags().StringVar(&keyID, "key-id", "", "key id recorded in the signature (default: the registered key matching --sign-key)")
	return c
}
