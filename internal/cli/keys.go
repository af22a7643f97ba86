package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/releases"
	"github.com/gpuaas/gpuaas/internal/sealer"
	"github.com/gpuaas/gpuaas/internal/server"
	"github.com/gpuaas/gpuaas/internal/store"
	"github.com/spf13/cobra"
)

// accessTokenPurpose is the signing_keys purpose of access token keys.
const accessTokenPurpose = "access_token"

// rotatablePurposes are the key purposes gpuaas keys rotate may add to.
var rotatablePurposes = []string{accessTokenPurpose, artifacts.RegistryKeyPurpose}

func newKeysCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "List, rotate and retire the token signing keys (on the database, safe while servers run)",
		Long: `List, rotate and retire the keys the control plane signs tokens with:
access_token (people's, service accounts' and nodes' access tokens) and
registry_token (the registry's bearer tokens). They work on the database
directly, with the server's --database-url, --data-dir and master key
(GPUAAS_* the same), and are safe while servers run: every replica reads
the keys again within ` + fmt.Sprint(reloadBoundSeconds()) + ` seconds (docs/operations.md, "Signing keys").`}
	cmd.AddCommand(newKeysListCmd(), newKeysRotateCmd(), newKeysRetireCmd())
	return cmd
}

// keysConfig is the part of the server's config the keys commands read.
type keysConfig struct{ cfg config.Config }

func (k *keysConfig) bind(cmd *cobra.Command, needsKey bool) {
	k.cfg = config.Defaults()
	fs := cmd.Flags()
	fs.StringVar(&k.cfg.DatabaseURL, "database-url", "", "postgres://… or sqlite://PATH (default: the SQLite database of --data-dir, as gpuaas dev keeps it)")
	fs.StringVar(&k.cfg.DataDir, "data-dir", k.cfg.DataDir, "directory for embedded state")
	if needsKey {
		fs.StringVar(&k.cfg.SecretKey, "secret-key", "", "base64 32-byte master key the server seals secrets with (prefer GPUAAS_SECRET_KEY or --secret-key-file)")
		fs.StringVar(&k.cfg.SecretKeyFile, "secret-key-file", "", "file holding the base64 master key (default: --data-dir's secret.key, as gpuaas dev keeps it)")
	}
}

// open applies GPUAAS_* and opens the database, falling back to the layout
// gpuaas dev keeps in the data dir.
func (k *keysConfig) open(cmd *cobra.Command) (*store.DB, error) {
	if err := config.ApplyEnv(cmd.Flags(), nil); err != nil {
		return nil, err
	}
	url := k.cfg.DatabaseURL
	if url == "" {
		path := filepath.Join(k.cfg.DataDir, "gpuaas.db")
		if _, err := os.Stat(path); err != nil {
			return nil, usageError{fmt.Sprintf("--database-url (or GPUAAS_DATABASE_URL) is required: there is no dev database at %s", path)}
		}
		url = "sqlite://" + path
	}
	return store.Open(cmd.Context(), url, nil)
}

// sealer is the master key's sealer, the server's or the dev data dir's.
func (k *keysConfig) sealer() (*sealer.Sealer, error) {
	var key []byte
	var err error
	switch {
	case k.cfg.SecretKey != "":
		key, err = sealer.DecodeKey(k.cfg.SecretKey)
	case k.cfg.SecretKeyFile != "":
		key, err = sealer.ReadKeyFile(k.cfg.SecretKeyFile)
	default:
		path := filepath.Join(k.cfg.DataDir, "secret.key")
		if _, statErr := os.Stat(path); statErr != nil {
			return nil, usageError{"the master key is required to seal a new key: set GPUAAS_SECRET_KEY or --secret-key-file, as for the server"}
		}
		key, err = sealer.ReadKeyFile(path)
	}
	if err != nil {
		return nil, err
	}
	return sealer.New(key)
}

// signingKeyRow is one key as gpuaas keys prints it.
type signingKeyRow struct {
	KID       string `json:"kid"`
	Purpose   string `json:"purpose"`
	Algorithm string `json:"algorithm"`
	CreatedAt string `json:"created_at"`
	RetiredAt string `json:"retired_at,omitempty"`
	// Signs marks the key its purpose signs with: the newest unretired
	// token key; for releases, the oldest unretired key (the one
	// releases.LoadSigningKey takes; gpuaas keys never adds another).
	Signs bool `json:"signs"`
}

func keyRows(rows []iam.SigningKey) []signingKeyRow {
	out := make([]signingKeyRow, 0, len(rows))
	signer := map[string]string{}
	for _, r := range rows { // oldest first: the last unretired signs
		if _, first := signer[r.Purpose]; r.RetiredAt.IsZero() && (r.Purpose != releases.KeyPurpose || !first) {
			signer[r.Purpose] = r.KID
		}
	}
	for _, r := range rows {
		row := signingKeyRow{KID: r.KID, Purpose: r.Purpose, Algorithm: r.Algorithm, CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339),
			Signs: signer[r.Purpose] == r.KID}
		if !r.RetiredAt.IsZero() {
			row.RetiredAt = r.RetiredAt.UTC().Format(time.RFC3339)
		}
		out = append(out, row)
	}
	return out
}

var keyColumns = []string{"kid", "purpose", "algorithm", "created_at", "retired_at", "signs"}

func newKeysListCmd() *cobra.Command {
	var k keysConfig
	var purpose string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the signing keys: kid, purpose, algorithm, created, retired, and which one signs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := k.open(cmd)
			if err != nil {
				return err
			}
			defer db.Close()
			purposes := []string{accessTokenPurpose, artifacts.RegistryKeyPurpose, releases.KeyPurpose}
			if purpose != "" {
				purposes = []string{purpose}
			}
			var all []iam.SigningKey
			for _, p := range purposes {
				rows, err := db.Queries().SigningKeys(cmd.Context(), p)
				if err != nil {
					return err
				}
				all = append(all, rows...)
			}
			return printResult(cmd, map[string]any{"items": keyRows(all)}, keyColumns...)
		},
	}
	k.bind(cmd, false)
	cmd.Flags().StringVar(&purpose, "purpose", "", "only this purpose's keys: access_token, registry_token or release_signing")
	return cmd
}

// checkRotatable refuses the purposes gpuaas keys does not change.
func checkRotatable(purpose string) error {
	if purpose == releases.KeyPurpose {
		return errors.New("the release_signing key is not rotated or retired by gpuaas keys: clients pin its public key to verify the platform's releases, so a new key would fail every verification (docs/releases.md)")
	}
	if !slices.Contains(rotatablePurposes, purpose) {
		return usageError{fmt.Sprintf("--purpose %q: want access_token or registry_token", purpose)}
	}
	return nil
}

func newKeysRotateCmd() *cobra.Command {
	var k keysConfig
	var purpose string
	cmd := &cobra.Command{
		Use:   "rotate",
		Short: "Add a key that becomes the signer of its purpose; older keys keep verifying",
		Long: `Add a new key of --purpose that signs new tokens once the replicas
reload (within the reload bound, docs/operations.md). Tokens signed by the
older keys keep working until they expire or the key is retired.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if purpose == "" {
				return usageError{"--purpose is required: access_token or registry_token"}
			}
			if err := checkRotatable(purpose); err != nil {
				return err
			}
			db, err := k.open(cmd)
			if err != nil {
				return err
			}
			defer db.Close()
			s, err := k.sealer()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := checkMasterKey(ctx, db, s, purpose); err != nil {
				return err
			}
			var key iam.SigningKey
			if purpose == artifacts.RegistryKeyPurpose {
				key, err = artifacts.NewRegistrySigningKey(s, nil)
			} else {
				key, err = iam.NewSigningKey(s, purpose, nil)
			}
			if err != nil {
				return err
			}
			key, err = db.Queries().AddSigningKey(ctx, key, keyAudit("signing_key.rotate", key.KID, "gpuaas keys rotate: the new "+purpose+" signer"))
			if err != nil {
				return err
			}
			line := fmt.Sprintf("added %s key %s: it signs once the replicas reload (within %d s); the older keys keep verifying", purpose, key.KID, reloadBoundSeconds())
			return printOutcome(cmd, line, keyRows([]iam.SigningKey{key})[0], keyColumns...)
		},
	}
	k.bind(cmd, true)
	cmd.Flags().StringVar(&purpose, "purpose", "", "access_token or registry_token")
	return cmd
}

// checkMasterKey refuses a master key that does not open the purpose's
// keys: a key sealed under another would be one no server can open, and
// every replica's reload would fail on it.
func checkMasterKey(ctx context.Context, db *store.DB, s *sealer.Sealer, purpose string) error {
	rows, err := db.Queries().SigningKeys(ctx, purpose)
	if err != nil {
		return err
	}
	for _, r := range slices.Backward(rows) {
		if !r.RetiredAt.IsZero() {
			continue
		}
		if _, err := iam.OpenSigningKey(s, purpose, r); err == nil {
			return nil
		}
		if _, err := s.Open(r.PrivateKey, r.KID); err == nil {
			return nil // sealed the legacy way; the servers reseal it
		}
		return errors.New("the master key given does not open the existing " + purpose + " keys: pass the servers' own (GPUAAS_SECRET_KEY, --secret-key-file)")
	}
	// No key of purpose to check against: a first key sealed under a key
	// the servers do not have would keep every one of them from starting.
	return errors.New("there is no " + purpose + " key to check the master key against: start a server on this database first (it creates the first keys), then rotate")
}

func newKeysRetireCmd() *cobra.Command {
	var k keysConfig
	cmd := &cobra.Command{
		Use:   "retire KID",
		Short: "Stop trusting a key: tokens it signed are refused once the replicas reload",
		Long: `Retire the key KID: it no longer signs or verifies, so every token it
signed is refused on each replica once it reloads (within the reload
bound). The last unretired key of a purpose cannot be retired: rotate
first, wait the reload bound, then retire.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			db, err := k.open(cmd)
			if err != nil {
				return err
			}
			defer db.Close()
			ctx, kid := cmd.Context(), args[0]
			release, err := db.Queries().SigningKeys(ctx, releases.KeyPurpose)
			if err != nil {
				return err
			}
			if slices.ContainsFunc(release, func(r iam.SigningKey) bool { return r.KID == kid }) {
				return checkRotatable(releases.KeyPurpose)
			}
			key, err := db.Queries().RetireSigningKey(ctx, kid, time.Now(), keyAudit("signing_key.retire", kid, "gpuaas keys retire: tokens it signed are refused"))
			if err != nil {
				return err
			}
			line := fmt.Sprintf("retired %s key %s: tokens it signed are refused once the replicas reload (within %d s)", key.Purpose, key.KID, reloadBoundSeconds())
			return printOutcome(cmd, line, keyRows([]iam.SigningKey{key})[0], keyColumns...)
		},
	}
	k.bind(cmd, false)
	return cmd
}

// reloadBoundSeconds is the longest a replica goes without reading the
// keys again: the reload interval and its jitter.
func reloadBoundSeconds() int { return int(server.SigningKeyReloadEvery.Seconds() * 1.1) }

// keyAudit is the audit row of a change to the keys: the system acts, as
// for the other changes made on the database directly.
func keyAudit(action, kid, reason string) store.AuditEvent {
	return store.AuditEvent{OccurredAt: time.Now(), ActorType: string(principal.System), ActorID: principal.SystemActor.ID,
		Action: action, ResourceType: "signing_key", ResourceID: kid, Reason: reason, Outcome: "success"}
}
