#!/usr/bin/env bash
# The app-team quickstart (docs/quickstart.md) as one script, against a
# running `gpuaas dev`. Needs: gpuaas on PATH, jq, Go and a Docker engine.
# Usage (from any directory): DATA_DIR=/path/to/.gpuaas examples/quickstart/quickstart.sh
# Re-runnable on the same data dir: each run uses its own service account,
# signing key and app version; it stops on the first failing command and
# removes its key files on exit.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
APP_SRC="$HERE/../my-app"
DATA_DIR="${DATA_DIR:-./.gpuaas}"
CREDS="$DATA_DIR/dev-credentials.json"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
RUN="$(date +%s)$RANDOM"              # makes this run's names unique
VERSION="1.0.$RUN"
SA="publisher-$RUN"
API_URL="$(jq -er .api_url "$CREDS")"
PROJECT="$(jq -er .project_id "$CREDS")"
ADMIN_EMAIL="$(jq -er .admin_email "$CREDS")"
export GPUAAS_API_URL="$API_URL" GPUAAS_PROJECT_ID="$PROJECT"
# This run's profiles live with its key files, not in the user's config.
export GPUAAS_CONFIG_DIR="$WORK/config"
REGISTRY="${GPUAAS_API_URL#http://}"

echo "== 1. sign in as the admin (setup only)"
jq -er .admin_password "$CREDS" | gpuaas login --email "$ADMIN_EMAIL" --password-stdin

echo "== 2. a service account for automation, and a signing key"
gpuaas sa create --name publisher --slug "$SA" --key-file "$WORK/$SA.json" >/dev/null
gpuaas artifact keygen --out "$WORK/cosign"
gpuaas artifact signing-key add --name "ci-$RUN" --public-key-file "$WORK/cosign.pub" >/dev/null

echo "== 3. build the example app (FROM scratch + a static binary) and save it"
cp -R "$APP_SRC" "$WORK/my-app"
(cd "$WORK/my-app" && CGO_ENABLED=0 go build -o my-app . && docker build -q -t "my-app:$VERSION" . >/dev/null)
docker save "my-app:$VERSION" -o "$WORK/my-app.tar"
docker rmi -f "my-app:$VERSION" >/dev/null

echo "== 4. as the service account: intent -> push -> sign -> register"
gpuaas sa token --key-file "$WORK/$SA.json"
ART="$(gpuaas artifact push "$WORK/my-app.tar" --app my-app --version "$VERSION" --sign-key "$WORK/cosign.key" --as "$SA" -o json)"
ART_ID="$(jq -er .id <<<"$ART")"
IMAGE_REF="$REGISTRY/$(jq -er '.repository + "@" + .digest' <<<"$ART")"
echo "registered $IMAGE_REF as $ART_ID"

echo "== 5. as the admin (still the active profile): verify and promote"
gpuaas artifact verify "$ART_ID" --reason "release check" -o json | jq -r '"trust: " + .trust_state'
for s in staged canary active; do
  gpuaas artifact promote "$ART_ID" --to "$s" --reason "rollout" -o json | jq -r '"state: " + .lifecycle_state'
done

echo "== 6. register the manifest, publish the version, entitle the project"
sed -e "s|\${IMAGE_REF}|$IMAGE_REF|" -e "s|\${VERSION}|$VERSION|" "$APP_SRC/my-app.yaml" > "$WORK/my-app.yaml"
gpuaas manifest validate "$WORK/my-app.yaml"
gpuaas manifest register "$WORK/my-app.yaml" -o table
gpuaas app publish my-app "$VERSION" --reason "first release" -o table
gpuaas app entitle my-app --mode tenant_dedicated --scope project >/dev/null

echo "== 7. as the service account: what would a launch get?"
gpuaas app catalog --as "$SA" -o table
gpuaas app preview my-app "$VERSION" --gpus 0 --as "$SA"
if gpuaas app preview my-app "$VERSION" --gpus 5 --as "$SA" 2>/dev/null; then
  echo "a launch outside the GPU bounds was accepted" >&2; exit 1
fi
echo "== done"
