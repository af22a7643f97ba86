package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/spf13/cobra"
)

func init() { commandFactories = append(commandFactories, newArtifactCmd) }

func newArtifactCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "artifact",
		Short: "App artifacts: publish (intent → push → register), list, verify and promote",
	}
	addClientFlags(cmd)
	projectFlag(cmd, true)
	cmd.AddCommand(newArtifactPushCmd(), newArtifactListCmd(), newArtifactGetCmd(),
		newArtifactKeygenCmd(), newArtifactSignCmd(), newSigningKeyCmd())
	for _, a := range []string{"promote", "verify", "revoke", "deprecate", "retire"} {
		cmd.AddCommand(newArtifactTransitionCmd(a))
	}
	return cmd
}

func newArtifactPushCmd() *cobra.Command {
	var app, version, artName, kind, channel, signKey, keyID string
	var noSign, requireProvenance bool
	c := &cobra.Command{
		Use:   "push IMAGE-TARBALL|IMAGE-REF|FILE",
		Short: "Get a publish intent, push the image or upload the file, and register its digest",
		Long: `OCI: IMAGE-TARBALL is a "docker save" / OCI tarball; IMAGE-REF an image in a registry you can read.
The image goes to the repository the control plane assigns, with the intent's
wrapped, single-use credentials. Blob (--kind blob): FILE is streamed to project
storage in resumable chunks with progress, and committed by its sha256.

--sign-key KEY (OCI only) signs the pushed digest before registration, in the
cosign layout artifact verify checks, and attaches signed SLSA provenance when
the intent requires it (--require-provenance). The key's public half must be
registered (gpuaas artifact signing-key add).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			started := time.Now()
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			if app == "" || version == "" || artName == "" {
				return errors.New("--app, --version and --name are required")
			}
			req := client.PublishIntentRequest{AppSlug: app, AppVersion: version, ArtifactName: artName, ArtifactKind: kind, Channel: channel}
			if kind == "blob" {
				req.SourceType = "artifact_store"
			}
			if noSign {
				f := false
				req.SignatureRequired = &f
			}
			req.ProvenanceRequired = requireProvenance
			// Open the key and the input before asking for an intent: a wrong
			// path or key must not mint publish credentials.
			var signer *imageSigner
			if signKey != "" {
				if kind == "blob" {
					return errors.New("--sign-key applies to OCI images: blobs are trusted by their sha256 digest")
				}
				if signer, err = loadImageSigner(signKey); err != nil {
					return err
				}
			}
			var f *os.File
			var img v1.Image
			if kind == "blob" {
				if f, err = os.Open(args[0]); err != nil {
					return err
				}
				defer f.Close()
			} else {
				tmp, err := os.MkdirTemp("", "gpuaas-push-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(tmp)
				if img, err = loadImage(ctx, args[0], tmp); err != nil {
					return err
				}
			}
			// One registration per app, version and name: say so before
			// minting credentials or pushing a byte.
			if prev, _, err := api.ListArtifacts(ctx, pid, client.ArtifactFilter{AppSlug: app, AppVersion: version, ArtifactName: artName, Limit: 1}); err == nil && len(prev) > 0 {
				a := prev[0]
				return fmt.Errorf("%s %s already has an artifact %q: %s (%s, trust %s, %s@%s); push under a new --version or --name, or use the registered one",
					app, version, artName, a.ID, a.LifecycleState, a.TrustState, a.Repository, a.Digest)
			}
			errw := cmd.ErrOrStderr()
			if signer != nil {
				if cmd.Flags().Changed("key-id") {
					signer.keyID = keyID
				} else {
					signer.resolveKeyID(ctx, errw, api, pid)
				}
			}
			it, err := api.CreatePublishIntent(ctx, pid, req)
			if err != nil {
				return err
			}
			reg := client.RegisterArtifactRequest{AppSlug: app, AppVersion: version, ArtifactName: artName, ArtifactKind: it.ArtifactKind, PublishIntentID: it.ID}
			if f != nil {
				st, err := f.Stat()
				if err != nil {
					return err
				}
				size := st.Size()
				line := newProgress(errw, "uploaded")
				digest, err := api.UploadBlob(ctx, it.UploadURL, f, size, 64<<20, func(sent int64) {
					line.update(sent, size)
				})
				line.done()
				if err != nil {
					return err
				}
				reg.SourceType, reg.SourceURI, reg.Digest = "artifact_store", it.SourceURI, digest
			} else {
				creds, err := api.Unwrap(ctx, it.WrappedCredentials.WrappingToken)
				if err != nil {
					return err
				}
				tag := it.TagHint
				if tag == "" {
					tag = "latest"
				}
				insecure := strings.HasPrefix(api.BaseURL, "http://")
				var opts []name.Option
				if insecure {
					opts = append(opts, name.Insecure)
				}
				ref, err := name.NewTag(creds.Registry+"/"+creds.Repository+":"+tag, opts...)
				if err != nil {
					return err
				}
				progress := make(chan v1.Update, 16)
				line := newProgress(errw, "pushed")
				printed := make(chan struct{})
				go func() {
					defer close(printed)
					for u := range progress {
						line.update(u.Complete, u.Total)
					}
				}()
				err = remote.Write(ref, img, remote.WithContext(ctx), remote.WithProgress(progress),
					remote.WithAuth(&authn.Basic{Username: creds.Username, Password: creds.Password}))
				<-printed // remote.Write closes progress on return
				if err == nil {
					line.update(line.total, line.total) // the last update may come before the manifest
				}
				line.done()
				if err != nil {
					return fmt.Errorf("push %s: %w", ref, err)
				}
				d, err := img.Digest()
				if err != nil {
					return err
				}
				reg.Repository, reg.Digest, reg.Tag = creds.Repository, d.String(), tag
				switch {
				case signer != nil:
					if it.SigningKeyID != "" && signer.keyID != "" && signer.keyID != it.SigningKeyID {
						fmt.Fprintf(errw, "warning: the intent requires signing key %s; %s is key %s\n", it.SigningKeyID, signer.path, signer.keyID)
					}
					err := signer.signPushed(ctx, errw, pushedImage{creds: creds, digest: d, insecure: insecure, intent: it, started: started, state: "pushed, not registered"})
					if err != nil {
						return err
					}
				case it.SignatureRequired:
					fmt.Fprintf(errw, "signatures are required: sign %s/%s@%s (cosign sign --key ...; or push with --sign-key next time), then run gpuaas artifact verify\n", creds.Registry, creds.Repository, d)
				}
			}
			art, err := api.RegisterArtifact(ctx, pid, reg)
			if err != nil {
				return err
			}
			return printJSON(cmd, art)
		},
	}
	c.Flags().StringVar(&app, "app", "", "app slug")
	c.Flags().StringVar(&version, "version", "", "app version")
	c.Flags().StringVar(&artName, "name", catalog.DefaultArtifactName, "artifact name (the manifest's artifacts[].name; a manifest with only image_ref expects "+catalog.DefaultArtifactName+")")
	c.Flags().StringVar(&kind, "kind", "oci", "oci or blob")
	c.Flags().StringVar(&channel, "channel", "", "channel hint (dev, stable, …)")
	c.Flags().BoolVar(&noSign, "no-signature", false, "do not require a signature for this artifact")
	c.Flags().StringVar(&signKey, "sign-key", "", "PEM private key (gpuaas artifact keygen) to sign the pushed image with (OCI only)")
	c.Flags().StringVar(&keyID, "key-id", "", "key id recorded in the signature (default: the registered key matching --sign-key)")
	c.Flags().BoolVar(&requireProvenance, "require-provenance", false, "require SLSA provenance; with --sign-key it is attached")
	return c
}

func newArtifactListCmd() *cobra.Command {
	var f client.ArtifactFilter
	c := &cobra.Command{
		Use:   "list",
		Short: "List the project's artifacts",
		RunE: func(cmd *cobra.Command, _ []string) error {
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			items, next, err := api.ListArtifacts(cmd.Context(), pid, f)
			if err != nil {
				return err
			}
			return printResult(cmd, map[string]any{"items": items, "next_cursor": next},
				"id", "app_slug", "app_version", "artifact_name", "lifecycle_state", "trust_state", "digest")
		},
	}
	c.Flags().StringVar(&f.AppSlug, "app", "", "filter by app slug")
	c.Flags().StringVar(&f.AppVersion, "version", "", "filter by app version")
	c.Flags().StringVar(&f.State, "state", "", "filter by lifecycle state")
	c.Flags().StringVar(&f.TrustState, "trust-state", "", "filter by trust state")
	c.Flags().StringVar(&f.Cursor, "cursor", "", "next_cursor of a previous page")
	return c
}

// newArtifactGetCmd is `artifact get` like every other noun's get; show
// stays as an alias.
func newArtifactGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "get ARTIFACT_ID|APP/VERSION/NAME",
		Aliases: []string{"show"},
		Short:   "Show one artifact",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			id, err := resolveArtifact(cmd.Context(), api, pid, args[0])
			if err != nil {
				return err
			}
			a, err := api.GetArtifact(cmd.Context(), pid, id)
			if err != nil {
				return err
			}
			return printResult(cmd, a, artifactFields...)
		},
	}
}

// artifactFields are the rows of an artifact in a table.
var artifactFields = []string{"id", "app_slug", "app_version", "artifact_name", "artifact_kind", "repository", "digest",
	"lifecycle_state", "trust_state", "trust_reason", "trust_detail", "signature_required", "revoked"}

func newArtifactTransitionCmd(action string) *cobra.Command {
	var reason, target string
	c := &cobra.Command{
		Use:   action + " ARTIFACT_ID|APP/VERSION/NAME",
		Short: strings.ToUpper(action[:1]) + action[1:] + " an artifact (recorded in the audit log with --reason)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pid, api, err := projectClient(cmd)
			if err != nil {
				return err
			}
			if reason == "" && action != "verify" {
				return errors.New("--reason is required: it is recorded in the audit log")
			}
			id, err := resolveArtifact(cmd.Context(), api, pid, args[0])
			if err != nil {
				return err
			}
			a, err := api.TransitionArtifact(cmd.Context(), pid, id, action, target, reason)
			if err != nil {
				return err
			}
			if err := printResult(cmd, a, artifactFields...); err != nil {
				return err
			}
			if action == "verify" && a.TrustState == "failed" {
				return failure{verifyFailure(a)}
			}
			return nil
		},
	}
	c.Flags().StringVar(&reason, "reason", "", "why (audited)")
	if action == "promote" {
		c.Flags().StringVar(&target, "to", "", "target state: staged, canary or active (default: the next one)")
	}
	return c
}

// progress reports bytes sent. On a terminal it rewrites one line in
// place; elsewhere (a pipe, a CI log) it prints whole lines, one per
// quarter of the total, so logs stay short and readable.
type progress struct {
	w        io.Writer
	verb     string
	terminal bool
	last     string
	quarter  int64
	total    int64
	printed  bool
}

func newProgress(w io.Writer, verb string) *progress {
	return &progress{w: w, verb: verb, terminal: isTerminal(w), quarter: -1}
}

func (p *progress) update(sent, total int64) {
	p.total = total
	s := fmt.Sprintf("%s %s of %s (%d%%)", p.verb, humanBytes(sent), humanBytes(total), 100*sent/max(total, 1))
	if p.terminal {
		if s != p.last {
			fmt.Fprint(p.w, "\r"+s)
			p.last, p.printed = s, true
		}
		return
	}
	if total <= 0 {
		return
	}
	if q := 4 * sent / total; q > p.quarter {
		p.quarter, p.last = q, s
		fmt.Fprintln(p.w, s)
	}
}

// done ends the terminal's rewritten line.
func (p *progress) done() {
	if p.terminal && p.printed {
		fmt.Fprintln(p.w)
	}
}

// humanBytes prints n in B, KiB, MiB or GiB with one decimal.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 2 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMG"[i])
}

// verifyFailure says why a verification failed, once (the stored detail
// repeats the reason), and what to do next.
func verifyFailure(a client.AppArtifact) string {
	msg := fmt.Sprintf("verification of %s failed: %s", a.ID, a.TrustReason)
	detail := strings.TrimPrefix(strings.TrimPrefix(a.TrustDetail, a.TrustReason), ": ")
	if detail != "" {
		msg += " (" + detail + ")"
	}
	switch a.TrustReason {
	case "signature_missing":
		msg += fmt.Sprintf("; sign it with gpuaas artifact sign %s --sign-key KEY, then verify again", a.ID)
	case "signature_invalid":
		msg += fmt.Sprintf("; sign it with a key the project registered (gpuaas artifact signing-key list): gpuaas artifact sign %s --sign-key KEY, then verify again", a.ID)
	case "provenance_missing":
		msg += fmt.Sprintf("; attach provenance with gpuaas artifact sign %s --sign-key KEY, then verify again", a.ID)
	}
	return msg
}
