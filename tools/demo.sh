#!/usr/bin/env bash
# `make demo`: a local control plane, the provider emulator with a realistic fault profile, the operator, and
# the claims-nightly sample watched to completion. No cluster and no API keys needed. Cleans up after itself.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
DEMO=/var/tmp/barge-demo
CLUSTER_DIR=.barge/demo-cluster
BARGE=.venv/bin/barge
PORT=8099
METRICS=18080
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  python3 tools/localcluster.py down --dir "$CLUSTER_DIR" >/dev/null 2>&1 || true
}
trap cleanup EXIT

echo "== 1/6 local control plane (etcd + kube-apiserver built from Go modules; cached after the first run)"
python3 tools/localcluster.py up --dir "$CLUSTER_DIR"
export KUBECONFIG=$PWD/$CLUSTER_DIR/kubeconfig
PATH="$(dirname "$(python3 tools/localcluster.py kubectl-path)"):$PATH"
kubectl apply --server-side -f crds/ >/dev/null
kubectl wait --for condition=established --timeout=60s crd/llmbatchjobs.barge.dev >/dev/null

echo "== 2/6 6,000 generated claims in $DEMO"
rm -rf "$DEMO" && mkdir -p "$DEMO"
$BARGE demo-data claims --count 6000 --out "$DEMO/claims.jsonl"

echo "== 3/6 barge emulator on 127.0.0.1:$PORT (fault profile: examples/claims/emulator-faults.yaml)"
$BARGE emulator --port "$PORT" --profile examples/claims/emulator-faults.yaml >"$DEMO/emulator.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/_emulator/state" >/dev/null && break; sleep 0.2; done

echo "== 4/6 namespace (tenant claims-team), API-key Secret marked for Barge, admin policy, operator"
kubectl create namespace claims --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl label namespace claims barge.dev/tenant=claims-team --overwrite >/dev/null
kubectl -n claims create secret generic anthropic --from-literal=api-key=demo-key-not-a-real-one \
  --dry-run=client -o yaml | kubectl label --local -f - barge.dev/credential=true -o yaml | kubectl apply -f - >/dev/null
# The admin's policy: this tenant's files under $DEMO, and the emulator on loopback allowed as a provider host.
cat >"$DEMO/policy.yaml" <<EOF
storage:
  prefixes: ["file://$DEMO/"]
endpoints:
  allow:
    - {host: 127.0.0.1, private: true}
EOF
BARGE_LEDGER_URL="$DEMO/ledger.db" BARGE_POLICY_FILE="$DEMO/policy.yaml" BARGE_POLL_SECONDS=2 BARGE_MIN_BATCH_WINDOW=60 \
  $BARGE operator --namespace claims --metrics-port "$METRICS" >"$DEMO/operator.log" 2>&1 &
pids+=($!)

echo "== 5/6 kubectl apply -f manifests/samples/claims-nightly.yaml (deadline: 6 hours from now)"
kubectl -n claims apply -f manifests/samples/claims-nightly.yaml
kubectl -n claims patch lbj claims-nightly --type=merge \
  -p "{\"spec\":{\"deadline\":\"$(date -u -d '+6 hours' +%Y-%m-%dT%H:%M:%SZ)\"}}" >/dev/null
kubectl -n claims get llmbatchjobs -w &
watcher=$!
pids+=($watcher)
phase=""
for _ in $(seq 600); do
  phase=$(kubectl -n claims get lbj claims-nightly -o jsonpath='{.status.phase}' 2>/dev/null || true)
  [[ "$phase" == Succeeded || "$phase" == Failed ]] && break
  sleep 1
done
sleep 1; kill "$watcher" 2>/dev/null || true

echo "== 6/6 result"
kubectl -n claims get lbj -o wide
kubectl -n claims get lbj claims-nightly -o jsonpath='{"counts:   "}{.status.counts}{"\nusage:    "}{.status.usage}{"\nmessage:  "}{.status.message}{"\n"}'
completed=$(kubectl -n claims get lbj claims-nightly -o jsonpath='{.status.completedAt}')
deadline=$(kubectl -n claims get lbj claims-nightly -o jsonpath='{.spec.deadline}')
echo "deadline slack: $(( $(date -d "$deadline" +%s) - $(date -d "$completed" +%s) ))s ($completed -> $deadline)"
echo "events:"; kubectl -n claims get events --field-selector involvedObject.name=claims-nightly \
  -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message | head -20
echo "results:  $DEMO/results/results.jsonl ($(wc -l <"$DEMO/results/results.jsonl") lines)," \
  "failures: $DEMO/results/failures.jsonl ($(wc -l <"$DEMO/results/failures.jsonl") lines)"
echo "demo finished in $(( SECONDS - started ))s with phase $phase"
[[ "$phase" == Succeeded ]]
