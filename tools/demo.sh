#!/usr/bin/env bash
# `make demo`: a local control plane, the provider emulator with a realistic fault profile, the operator, and
# the claims-nightly sample watched to completion. No cluster and no API keys needed. Cleans up after itself.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
DEMO=/var/tmp/barge-demo
CLUSTER_DIR=.barge/demo-cluster
BARGE=.venv/bin/barge
# Free ports unless given: the emulator's is the one it reports binding (--port 0), the operator's /metrics and
# /healthz one is picked here (the operator exits naming it if it is taken after all).
PORT=${BARGE_DEMO_EMULATOR_PORT:-0}
METRICS=${BARGE_DEMO_METRICS_PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')}
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  python3 tools/localcluster.py down --dir "$CLUSTER_DIR" >/dev/null 2>&1 || true
}
trap cleanup EXIT

echo "== 1/6 local control plane: etcd + kube-apiserver, built from Go modules the first time, cached after"
python3 tools/demo_tools.py
built=$SECONDS
python3 tools/localcluster.py up --dir "$CLUSTER_DIR"
echo "   control plane up after $(( SECONDS - built ))s"
export KUBECONFIG=$PWD/$CLUSTER_DIR/kubeconfig
PATH="$(dirname "$(python3 tools/localcluster.py kubectl-path)"):$PATH"
kubectl apply --server-side -f crds/ >/dev/null
kubectl wait --for condition=established --timeout=60s crd/llmbatchjobs.barge.dev >/dev/null

echo "== 2/6 6,000 generated claims in $DEMO"
rm -rf "$DEMO" && mkdir -p "$DEMO"
$BARGE demo-data claims --count 6000 --out "$DEMO/claims.jsonl"

echo "== 3/6 barge emulator (fault profile: examples/claims/emulator-faults.yaml)"
$BARGE emulator --port "$PORT" --profile examples/claims/emulator-faults.yaml >"$DEMO/emulator.log" 2>&1 &
emulator_pid=$!
pids+=($emulator_pid)
url=""
for _ in $(seq 300); do
  url=$(grep -o 'listening on http://[0-9.:]*' "$DEMO/emulator.log" | head -1 | cut -d' ' -f3 || true)
  [[ -n "$url" ]] && curl -sf "$url/_emulator/state" >/dev/null && break
  kill -0 "$emulator_pid" 2>/dev/null || { echo "the emulator exited:"; cat "$DEMO/emulator.log"; exit 1; }
  sleep 0.2
done
[[ -n "$url" ]] || { echo "the emulator never said where it listens:"; cat "$DEMO/emulator.log"; exit 1; }
PORT=${url##*:}
echo "   emulator on $url (log: $DEMO/emulator.log)"

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
operator_pid=$!
pids+=($operator_pid)
# Up when /healthz answers; an operator that exits (its port taken, a bad setting) is shown at once, not waited on.
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$METRICS/healthz" >/dev/null && break
  kill -0 "$operator_pid" 2>/dev/null || { echo "the operator exited:"; tail -20 "$DEMO/operator.log"; exit 1; }
  sleep 0.2
done
echo "   operator up: http://127.0.0.1:$METRICS/metrics and /healthz (log: $DEMO/operator.log)"

# SAMPLE=claims-cascade (make demo SAMPLE=claims-cascade): the two-stage cascade of issue 29 instead, planned first.
SAMPLE=${SAMPLE:-claims-nightly}
case "$SAMPLE" in
  claims-nightly) JOBS=(claims-nightly) ;;
  claims-cascade) JOBS=(claims-classify claims-summarise); $BARGE plan "manifests/samples/$SAMPLE.yaml" ;;
  *) echo "unknown SAMPLE=$SAMPLE (claims-nightly or claims-cascade)" >&2; exit 2 ;;
esac
echo "== 5/6 kubectl apply -f manifests/samples/$SAMPLE.yaml (deadline: 6 hours from now)"
sed "s#http://127.0.0.1:8099#http://127.0.0.1:$PORT#" "manifests/samples/$SAMPLE.yaml" | kubectl -n claims apply -f -
for job in "${JOBS[@]}"; do
  kubectl -n claims patch lbj "$job" --type=merge \
    -p "{\"spec\":{\"deadline\":\"$(date -u -d '+6 hours' +%Y-%m-%dT%H:%M:%SZ)\"}}" >/dev/null
done
kubectl -n claims get llmbatchjobs -w &
watcher=$!
pids+=($watcher)
phase=""
for job in "${JOBS[@]}"; do
  for _ in $(seq 600); do
    phase=$(kubectl -n claims get lbj "$job" -o jsonpath='{.status.phase}' 2>/dev/null || true)
    [[ "$phase" == Succeeded || "$phase" == Failed ]] && break
    sleep 1
  done
  [[ "$phase" == Succeeded ]] || break
done
sleep 1; kill "$watcher" 2>/dev/null || true
if [[ "$SAMPLE" == claims-cascade ]]; then
  echo "== 6/6 result"
  kubectl -n claims get lbj -o wide
  for job in "${JOBS[@]}"; do
    kubectl -n claims get lbj "$job" -o jsonpath='{.metadata.name}{": "}{.status.counts}{" cost $"}{.status.usage.costUSD}{" completed "}{.status.completedAt}{"\n"}'
  done
  kubectl -n claims get events --field-selector reason=Fed -o custom-columns=REASON:.reason,MESSAGE:.message | head -10
  echo "demo finished in $(( SECONDS - started ))s with phase $phase"
  [[ "$phase" == Succeeded ]]
  exit
fi

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
