#!/usr/bin/env bash
# The app-team quickstart (docs/quickstart.md) as one script, against a
# running `gpuaas dev`: build, push signed, verify, promote, publish, launch,
# upgrade, roll back, decommission, and read the usage. Needs gpuaas on PATH,
# jq, Go and a Docker engine.
# Usage (from any directory): DATA_DIR=/path/to/.gpuaas examples/quickstart/quickstart.sh
# Re-runnable on the same data dir: each run's versions sort after the last
# run's (1.<unix time>.0 and .1), and on exit it retires its versions,
# deletes its service accounts and removes its images and key files, so
# runs do not pile up. It stops on the first failing command.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
APP_SRC="$HERE/../my-app"
DATA_DIR="${DATA_DIR:-./.gpuaas}"
CREDS="$DATA_DIR/dev-credentials.json"
WORK="$(mktemp -d)"
RUN="$(date +%s)"
V1="1.$RUN.0" V2="1.$RUN.1"
SA="publisher-$RUN$RANDOM" OP="operator-$RUN$RANDOM"
API_URL="$(jq -er .api_url "$CREDS")"
PROJECT="$(jq -er .project_id "$CREDS")"
ADMIN_EMAIL="$(jq -er .admin_email "$CREDS")"
export GPUAAS_API_URL="$API_URL" GPUAAS_PROJECT_ID="$PROJECT"
# This run's profiles live with its key files, not in the user's config.
export GPUAAS_CONFIG_DIR="$WORK/config"
REGISTRY="${GPUAAS_API_URL#http://}"
INSTANCE_ID=""

cleanup() {
  set +e
  [ -n "$INSTANCE_ID" ] && gpuaas instance decommission "$INSTANCE_ID" --wait --as "$OP" >/dev/null 2>&1
  for v in "$V2" "$V1"; do
    gpuaas app deprecate my-app "$v" --reason "quickstart run $RUN done" >/dev/null 2>&1
    gpuaas app retire my-app "$v" --reason "quickstart run $RUN done" >/dev/null 2>&1
  done
  gpuaas sa delete "$SA" >/dev/null 2>&1
  gpuaas sa delete "$OP" >/dev/null 2>&1
  docker rmi -f "my-app-qs:$V1" "my-app-qs:$V2" >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== 1. sign in as the admin (setup only)"
jq -er .admin_password "$CREDS" | gpuaas login --email "$ADMIN_EMAIL" --password-stdin

echo "== 2. a service account for automation, and a signing key"
gpuaas sa create --name publisher --slug "$SA" --key-file "$WORK/$SA.json" >/dev/null
gpuaas artifact keygen --out "$WORK/cosign"
gpuaas artifact signing-key add --name "ci-$RUN$RANDOM" --public-key-file "$WORK/cosign.pub" >/dev/null
gpuaas sa token --key-file "$WORK/$SA.json"

# ship VERSION: build the example app as VERSION, push it signed as the
# service account, verify and promote it, register and publish the version.
ship() {
  local version="$1"
  echo "== ship $version: build, push signed, verify, promote, register, publish"
  rm -rf "$WORK/my-app" && cp -R "$APP_SRC" "$WORK/my-app"
  (cd "$WORK/my-app" && CGO_ENABLED=0 go build -ldflags "-X main.version=$version" -o my-app . &&
    docker build -q -t "my-app-qs:$version" . >/dev/null)
  local art ref
  art="$(gpuaas artifact push "my-app-qs:$version" --app my-app --version "$version" --sign-key "$WORK/cosign.key" --as "$SA" -o json)"
  ref="$REGISTRY/$(jq -er '.repository + "@" + .digest' <<<"$art")"
  gpuaas artifact verify "my-app/$version/runtime" --reason "release check" -o json | jq -r '"trust: " + .trust_state'
  for s in staged canary active; do
    gpuaas artifact promote "my-app/$version/runtime" --to "$s" --reason rollout -o json | jq -r '"state: " + .lifecycle_state'
  done
  gpuaas manifest render "$APP_SRC/my-app.yaml" --set version="$version" --set image_ref="$ref" --out "$WORK/my-app-$version.yaml"
  gpuaas manifest validate "$WORK/my-app-$version.yaml"
  gpuaas manifest register "$WORK/my-app-$version.yaml" -o table
  gpuaas app publish my-app "$version" --reason "quickstart run $RUN" -o table
}

ship "$V1"
gpuaas app entitle my-app --mode tenant_dedicated --scope project >/dev/null
# Priced once per data dir: the meter keeps its price across runs.
if ! gpuaas billing price list -o json | jq -e '.items[] | select(.meter == "my-app/session_seconds")' >/dev/null; then
  gpuaas billing price add --meter my-app/session_seconds --price-micros 1000 --note quickstart >/dev/null
fi

echo "== as the service account: what would a launch get?"
gpuaas app catalog --as "$SA" -o table
gpuaas app preview my-app "$V1" --gpus 0 --as "$SA"
if gpuaas app preview my-app "$V1" --gpus 5 --as "$SA" 2>/dev/null; then
  echo "a launch outside the GPU bounds was accepted" >&2; exit 1
fi

echo "== launch as an operator service account"
gpuaas sa create --name operator --slug "$OP" --role app_operator --key-file "$WORK/$OP.json" >/dev/null
gpuaas sa token --key-file "$WORK/$OP.json"
INSTANCE="$(gpuaas instance create my-app "$V1" --name "quickstart-$RUN" --wait --as "$OP" -o json)"
INSTANCE_ID="$(jq -er .id <<<"$INSTANCE")"
curl -fsS "$(jq -er .access.local_url <<<"$INSTANCE")"

ship "$V2"
echo "== upgrade, and roll back"
gpuaas instance upgrade "$INSTANCE_ID" "$V2" --wait --as "$OP" -o table
curl -fsS "$(gpuaas instance get "$INSTANCE_ID" -o json | jq -er .access.local_url)"
gpuaas instance rollback "$INSTANCE_ID" "$V1" --wait --as "$OP" -o table

echo "== decommission"
gpuaas instance decommission "$INSTANCE_ID" --wait --as "$OP" -o table
test -z "$(docker ps -aq --filter "label=gpuaas.instance_id=$INSTANCE_ID")" && echo "no container left"

echo "== usage"
for _ in $(seq 90); do   # metering runs every --billing-meter-interval (1m by default)
  [ "$(gpuaas usage --instance "$INSTANCE_ID" -o json | jq '.items | length')" -gt 0 ] && break
  sleep 1
done
gpuaas usage --instance "$INSTANCE_ID" -o table
INSTANCE_ID=""   # decommissioned: nothing for cleanup to do
echo "== done"
