#!/usr/bin/env bash
# Every suite over the verbs backend on a real RDMA stack: soft-RoCE (rxe0) in a QEMU
# guest (ci/rdma-vm.sh). The test binaries and boomctl are built once here with the
# `rdma` feature; the guest runs them from this machine's file system:
#
# - the transport conformance suite over verbs (`transport::verbs::tests`),
# - the kv suite over verbs (tests/kv.rs, module `verbs`: every protocol, the value
#   sizes, restart, round-trip counts, many clients, pool full),
# - the isolation attacks over verbs (tests/isolation.rs, module `verbs`: another
#   client's rkey, a revoked grant's, blind guesses; memory windows refuse them),
# - the kill test over verbs with fewer kills (tests/kill.rs),
# - a short crash test over verbs (`boomctl crashtest --transport verbs`),
# - a CLI session: `serve --listen verbs://`, put/get/del/stats with each protocol,
#   `ycsb --server verbs://`, SIGTERM, `recover`,
# - `sweep latency --quick --transport verbs` at 32 B: CSV, figures, SETUP.md and a
#   SUMMARY.md that states BOOM's saving over RDMP-KV: the median of the repeats'
#   differences with their interval.
#
# Any failure fails this script (and CI). BOOMKV_RDMA_VM_KILLS (default 4) sets the
# number of kills; BOOMKV_RDMA_VM_TIMEOUT (default 2400 s) bounds the guest.
set -euo pipefail
cd "$(dirname "$0")/.."
t_start=$(date +%s)
# The guest sees this machine's files, except /tmp, /run and /dev/shm, which are its own:
# a checkout there (and its target/) would be invisible to it.
case "$(pwd -P)/" in
  /tmp/* | /run/* | /dev/shm/*)
    echo "rdma-vm check: the checkout is under $(pwd -P), which the guest cannot see (its /tmp, /run and /dev/shm are its own); clone it elsewhere" >&2
    exit 1 ;;
esac

# ci/rdma-vm.sh installs the guest's packages; the build needs ci/install.sh's.
echo "rdma-vm check: building the rdma test binaries"
json=$(mktemp)
trap 'rm -f "$json"' EXIT
cargo test --features rdma --no-run --message-format=json-render-diagnostics >"$json"
bins=$(python3 - "$json" <<'EOF'
import json, sys
found = {}
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    key = ("test-" if m["profile"]["test"] else "bin-") + t["name"]
    found[key] = m["executable"]
for want, var in [("test-boomkv", "LIB"), ("test-kv", "KV"), ("test-isolation", "ISO"), ("test-kill", "KILL"),
                  ("bin-boomctl", "BOOMCTL")]:
    if want not in found:
        sys.exit(f"check-rdma-vm: no {want} in cargo's output")
    print(f"{var}={found[want]}")
EOF
)
eval "$bins"
t_built=$(date +%s)
echo "rdma-vm check: built in $((t_built - t_start)) s: $LIB $KV $ISO $KILL $BOOMCTL"

# The guest's /tmp is its own, so the script goes to the read-write share.
share=$(mktemp -d /tmp/rdma-vm-check.XXXXXX)
guest=$share/check.sh
trap 'rm -f "$json"; rm -rf "$share"' EXIT
cat >"$guest" <<EOF
set -euo pipefail
LIB=$LIB KV=$KV ISO=$ISO KILL=$KILL BOOMCTL=$BOOMCTL
kills=${BOOMKV_RDMA_VM_KILLS:-4}
EOF
cat >>"$guest" <<'EOF'
step() { echo; echo "== rdma-vm check: $* ($(date +%T))"; }
ibv_devinfo -d rxe0 | grep -E 'hca_id|state|active_mtu|link_layer'

step "transport conformance suite over verbs"
"$LIB" --ignored transport::verbs::tests --skip conformance_child_peer

step "kv suite over verbs"
"$KV" --ignored verbs::

step "isolation attacks over verbs"
"$ISO" --ignored verbs::

step "kill test over verbs ($kills kills)"
BOOMKV_KILLS=$kills "$KILL" --ignored kills_over_verbs --nocapture

step "crash test over verbs"
"$BOOMCTL" crashtest --transport verbs --iterations 2 --ops 200 --threads 2
# The client-durable protocols (rdmp-cc, pdpm-direct, clover) cannot be crash-tested
# here: the device's FLUSH is invisible to the simulator. crashtest says so.
cerr=$(mktemp)
if "$BOOMCTL" crashtest --transport verbs --protocol pdpm-direct --iterations 1 2>"$cerr"; then
  echo "crashtest over verbs accepted a client-durable protocol"; exit 1
fi
grep -q "crash simulator cannot see it" "$cerr" || { cat "$cerr"; exit 1; }

step "CLI session over verbs"
dir=$(mktemp -d)
srv=verbs://$RDMA_VM_IP:7471
"$BOOMCTL" serve --pmem "$dir/pool" --pool-size 64M --segment-size 4M --stats-interval 0 \
  --listen "$srv" --device rxe0 2>"$dir/serve.log" &
serve_pid=$!
trap 'kill -KILL $serve_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  "$BOOMCTL" stats --server "$srv" >/dev/null 2>&1 && break
  kill -0 $serve_pid || { cat "$dir/serve.log"; exit 1; }
  sleep 0.5
done
# The passive protocols' table and arena, small (the first client sizes them).
small="--cells 512 --cell-value 1024 --clover-data 4M"
for p in boom rdmp rpc rdmp-cc herd rfp pdpm-direct clover; do
  "$BOOMCTL" put --server "$srv" --protocol $p $small "key-$p" "value over $p"
  got=$("$BOOMCTL" get --server "$srv" --protocol $p "key-$p")
  [ "$got" = "value over $p" ] || { echo "get with $p returned '$got'"; exit 1; }
  "$BOOMCTL" put --server "$srv" --protocol $p "gone-$p" x
  "$BOOMCTL" del --server "$srv" --protocol $p "gone-$p"
  if "$BOOMCTL" get --server "$srv" --protocol $p "gone-$p" 2>"$dir/err"; then
    echo "deleted key still there ($p)"; exit 1
  fi
  grep -q "key not found" "$dir/err" || { cat "$dir/err"; exit 1; }
done
# To a file first: `| grep -q` may close the pipe before boomctl has printed everything.
"$BOOMCTL" stats --server "$srv" >"$dir/stats.txt"
grep -q puts "$dir/stats.txt"
for p in boom rdmp rpc rdmp-cc herd rfp pdpm-direct clover; do
  "$BOOMCTL" ycsb --server "$srv" --protocol $p --mix a --records 200 --ops 400 --threads 2 --size 256 --quiet
done
kill -TERM $serve_pid
wait $serve_pid
trap - EXIT
grep -q "stopped after" "$dir/serve.log" || { cat "$dir/serve.log"; exit 1; }
# rxe has type-2 memory windows: the server binds each client's regions to its connection.
grep -q "clients isolated by type-2 memory windows" "$dir/serve.log" || { cat "$dir/serve.log"; exit 1; }
"$BOOMCTL" recover --pmem "$dir/pool" | tee "$dir/recover.txt"
grep -qi "keys" "$dir/recover.txt"
rm -rf "$dir"
step "latency sweep over verbs (quick, 32 B)"
# The metadata round trip BOOM removes, measured over the verbs path: SUMMARY.md must
# state it with its interval (the figures are an emulator's, and say so).
sw=$(mktemp -d)
"$BOOMCTL" sweep latency --quick --transport verbs --sizes 32 --out "$sw/out" --pmem "$sw" --quiet
for f in latency.csv SUMMARY.md SETUP.md fig13-put-latency.png fig14-get-latency.svg; do
  [ -s "$sw/out/$f" ] || { echo "sweep over verbs wrote no $f"; ls -l "$sw/out"; exit 1; }
done
grep "32 B PUT: RDMP-KV's median minus BOOM-KV's" "$sw/out/SUMMARY.md" | grep -q "us: the median of the 3 repeats' differences" \
  || { cat "$sw/out/SUMMARY.md"; exit 1; }
grep -q "QEMU TCG" "$sw/out/SETUP.md" || { echo "SETUP.md does not say the figures are an emulator's"; exit 1; }
grep -E "^- (32 B (PUT|GET):|paper:)" "$sw/out/SUMMARY.md" || true
rm -rf "$sw"
step "all verbs checks passed"
EOF

echo "rdma-vm check: running in the guest"
bash ci/rdma-vm.sh --share "$share" --timeout "${BOOMKV_RDMA_VM_TIMEOUT:-2400}" -- bash "$guest"
t_end=$(date +%s)
echo "rdma-vm check: passed; build $((t_built - t_start)) s, guest $((t_end - t_built)) s, total $((t_end - t_start)) s"
