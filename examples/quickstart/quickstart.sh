#!/usr/bin/env bash
# The app-team quickstart (docs/quickstart.md) as one script, against a
# running `gpuaas dev`. Needs: gpuaas on PATH, jq, and a Docker engine to
# build the example image. Usage: DATA_DIR=./.gpuaas ./quickstart.sh
set -euo pipefail
DATA_DIR="${DATA_DIR:-./.gpuaas}"
WORK="$(mktemp -d)"
CREDS="$DATA_DIR/dev-credentials.json"
export GPUAAS_API_URL="$(jq -r .api_url "$CREDS")"
export GPUAAS_PROJECT_ID="$(jq -r .project_id "$CREDS")"
REGISTRY="${GPUAAS_API_URL#http://}"

echo "== 1. sign in as the admin (setup only)"
jq -r .admin_password "$CREDS" | gpuaas login --email "$(jq -r .admin_email "$CREDS")" --password-stdin

echo "== 2. a service account for automation, and the project's signing key"
gpuaas sa create --name publisher --slug "publisher-$RANDOM" --key-file "$WORK/publisher.json" >/dev/null
gpuaas artifact keygen --out "$WORK/cosign"
gpuaas artifact signing-key add --name ci --public-key-file "$WORK/cosign.pub" >/dev/null

echo "== 3. build an image (FROM scratch + a static binary) and save it"
mkdir -p "$WORK/img" && cd "$WORK/img"
printf 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hello from a gpuaas app") }\n' > main.go
go mod init hello >/dev/null 2>&1
CGO_ENABLED=0 go build -o hello .
printf 'FROM scratch\nCOPY hello /hello\nENTRYPOINT ["/hello"]\n' > Dockerfile
DOCKER_BUILDKIT=0 docker build -q -t quickstart-hello:1 . >/dev/null 2>&1
docker save quickstart-hello:1 -o "$WORK/hello.tar"
docker rmi -f quickstart-hello:1 >/dev/null
cd - >/dev/null

echo "== 4. as the service account: intent -> push -> sign -> register"
gpuaas sa token --key-file "$WORK/publisher.json"
ART="$(gpuaas artifact push "$WORK/hello.tar" --app hello --version 1.0.0 --sign-key "$WORK/cosign.key")"
ART_ID="$(jq -r .id <<<"$ART")"
DIGEST="$(jq -r .digest <<<"$ART")"
REPO="$(jq -r .repository <<<"$ART")"
echo "registered $REPO@$DIGEST as $ART_ID"

echo "== 5. as the admin: verify and promote the artifact"
jq -r .admin_password "$CREDS" | gpuaas login --email "$(jq -r .admin_email "$CREDS")" --password-stdin
gpuaas artifact verify "$ART_ID" --reason "release check" | jq -r '"trust: " + .trust_state'
for s in staged canary active; do
  gpuaas artifact promote "$ART_ID" --to "$s" --reason "rollout" | jq -r '"state: " + .lifecycle_state'
done

echo "== 6. register the manifest, publish the version, entitle the project"
cat > "$WORK/hello.yaml" <<YAML
app:
  slug: hello
  display_name: Hello
  runtime_backend: launchable_oci
  supported_modes: {operating_modes: [tenant_dedicated], control_plane_scopes: [project]}
version:
  version: 1.0.0
  runtime_backend: launchable_oci
  artifacts:
    - {name: runtime, artifact_kind: oci, source_type: oci_registry, repository: $REPO}
  runtime_profile:
    kind: launchable_oci
    image_ref: $REGISTRY/$REPO@$DIGEST
    command: ["/hello"]
    resources:
      gpu_count: {default: 1, min: 0, max: 2}
YAML
gpuaas manifest validate "$WORK/hello.yaml"
gpuaas manifest register "$WORK/hello.yaml"
gpuaas app publish hello 1.0.0 --reason "first release"
gpuaas app entitle hello --project "$GPUAAS_PROJECT_ID" --mode tenant_dedicated --scope project >/dev/null

echo "== 7. as the service account: what would a launch get?"
gpuaas sa token --key-file "$WORK/publisher.json"
gpuaas app catalog --project "$GPUAAS_PROJECT_ID"
gpuaas app preview hello 1.0.0 --project "$GPUAAS_PROJECT_ID" --gpus 2
if gpuaas app preview hello 1.0.0 --project "$GPUAAS_PROJECT_ID" --gpus 5 2>/dev/null; then
  echo "a launch outside the GPU bounds was accepted" >&2; exit 1
fi
echo "== done ($WORK)"
