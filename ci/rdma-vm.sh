#!/usr/bin/env bash
# Runs one command on a real RDMA stack without RDMA hardware: soft-RoCE (`rdma_rxe`) in
# a QEMU guest running Debian's own kernel, for machines whose kernel has no RDMA support
# or cannot load modules (containers, CI).
#
#   ci/rdma-vm.sh [--timeout SECS] [--mem MiB] [--cpus N] [--share DIR] -- COMMAND [ARG...]
#
# The guest sees this machine's root file system read-only over 9p with a tmpfs overlay
# on top (writes succeed and vanish at power-off), so binaries built here run there as
# they are; /tmp, /run and /dev/shm are the guest's own (empty). DIR (default: a fresh temporary directory, printed) is shared read-write and
# mounted at the same path inside, for results that must outlive the guest; $RDMA_VM_SHARE
# names it. COMMAND (one argument: a bash script) runs in the current directory, with
# BOOMKV_RDMA_DEVICE=rxe0 and RDMA_VM_IP=10.0.2.15 set (rxe loops traffic to its own
# address back, so servers and clients run in the same guest). Its output streams here;
# the script exits with its status (124 when it ran out of time, 125 when the guest
# failed before running it). The guest always powers off; qemu is killed on timeout.
#
# Everything runs under TCG (`-accel tcg -cpu max`): KVM does not work on these machines
# (`-cpu host` aborts, other models hang). Figures measured inside are an emulator's.
#
# Needs root (apt-get, and 9p with security_model=none). Installs, when missing:
# qemu-system-x86 linux-image-amd64 busybox-static rdma-core ibverbs-utils
# ibverbs-providers perftest cpio iproute2 kmod. Note: on Debian 12 with a backported
# qemu-utils, installing qemu-system-x86 7.2 replaces it with 7.2's.
set -euo pipefail

timeout_s=900
mem=3072
cpus=2
share=""
while [ $# -gt 0 ]; do
  case "$1" in
    --timeout) timeout_s=$2; shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --share) share=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "usage: ci/rdma-vm.sh [--timeout SECS] [--mem MiB] [--cpus N] [--share DIR] -- COMMAND..." >&2
  exit 2
fi
log() { echo "rdma-vm: $*" >&2; }

# --- packages ---------------------------------------------------------------------------
pkgs=(qemu-system-x86 linux-image-amd64 busybox-static rdma-core ibverbs-utils ibverbs-providers
  libibverbs1 perftest cpio iproute2 kmod)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- kernel and modules -----------------------------------------------------------------
# The newest kernel in /boot that has its modules (not necessarily the running one).
kver=""
for k in $(ls /boot/vmlinuz-* 2>/dev/null | sed 's|/boot/vmlinuz-||' | sort -V); do
  [ -d "/lib/modules/$k/kernel" ] && kver=$k
done
[ -n "$kver" ] || { log "no kernel with modules in /boot (linux-image-amd64)"; exit 125; }
[ -f "/lib/modules/$kver/modules.dep" ] || depmod "$kver"

work=$(mktemp -d /tmp/rdma-vm.XXXXXX)
qemu_pid=""
cleanup() {
  if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
    kill -KILL "$qemu_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "$share" ]; then
  share=$(mktemp -d /tmp/rdma-vm-share.XXXXXX)
  log "results directory: $share"
fi
mkdir -p "$share"
share=$(cd "$share" && pwd -P)
ctl="$share/.rdma-vm"
rm -rf "$ctl"
mkdir -p "$ctl"

# The modules, in load order (modprobe --show-depends resolves the graph). rxe needs the
# crc32 crypto algorithm, which is not a declared dependency: without crc32_generic
# `rdma link add` fails with "No such file or directory".
wanted=(virtio_pci virtio_net 9pnet_virtio 9p overlay crc32_generic crc32c_generic ib_uverbs rdma_rxe)
root="$work/initramfs"
mkdir -p "$root"/{bin,sbin,proc,sys,dev,newroot,lower,upper,mods}
n=0
: >"$root/mods/order"
for m in "${wanted[@]}"; do
  while read -r kind path _; do
    [ "$kind" = insmod ] || continue
    base=$(basename "$path")
    name=${base%%.ko*}
    grep -qx "$name" "$root/mods/order" 2>/dev/null && continue
    case "$base" in
      *.ko.xz) xz -dc "$path" >"$root/mods/$name.ko" ;;
      *.ko.zst) zstd -qdc "$path" >"$root/mods/$name.ko" ;;
      *.ko.gz) gzip -dc "$path" >"$root/mods/$name.ko" ;;
      *) cp "$path" "$root/mods/$name.ko" ;;
    esac
    echo "$name" >>"$root/mods/order"
    n=$((n + 1))
  done < <(modprobe -S "$kver" --show-depends "$m" 2>/dev/null || true)
done
grep -qx rdma_rxe "$root/mods/order" || { log "rdma_rxe not found for kernel $kver"; exit 125; }
cp /bin/busybox "$root/bin/busybox"
for a in sh mount mkdir insmod chroot sleep echo cat poweroff switch_root; do ln -s busybox "$root/bin/$a"; done

# Stage 1 (busybox, in the initramfs): modules, the host root with an overlay, chroot.
cat >"$root/init" <<'EOF'
#!/bin/sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /mods/order); do
  insmod /mods/$m.ko || echo "rdma-vm guest: insmod $m failed"
done
share=$(cat /share-path)
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose hostroot /lower || { echo "rdma-vm guest: no host root"; poweroff -f; }
mount -t tmpfs -o size=75% tmp /upper
mkdir -p /upper/u /upper/w
mount -t overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w,redirect_dir=on overlay /newroot || { echo "rdma-vm guest: overlay failed"; poweroff -f; }
mount -t proc proc /newroot/proc
mount -t sysfs sys /newroot/sys
mount -t devtmpfs dev /newroot/dev
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
mount -t tmpfs tmpfs /newroot/dev/shm
mount -t tmpfs -o size=50% tmpfs /newroot/tmp
mount -t tmpfs tmpfs /newroot/run
mkdir -p "/newroot$share"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 results "/newroot$share" || { echo "rdma-vm guest: no results share"; poweroff -f; }
chroot /newroot /bin/sh "$share/.rdma-vm/stage2.sh"
echo "rdma-vm guest: done"
poweroff -f
EOF
chmod +x "$root/init"
echo "$share" >"$root/share-path"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initrd.gz"

# Stage 2 (inside the chroot, the host's own tools): network, rxe0, the command.
# One argument is a shell script; several are a command and its arguments.
if [ $# -eq 1 ]; then printf '%s\n' "$1" >"$ctl/cmd"; else printf '%q ' "$@" >"$ctl/cmd"; fi
cat >"$ctl/stage2.sh" <<EOF
#!/bin/sh
ctl="$ctl"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:\${HOME:-/root}/.cargo/bin
export HOME=/root LANG=C.UTF-8 BOOMKV_RDMA_DEVICE=rxe0 RDMA_VM_IP=10.0.2.15 RDMA_VM_SHARE="$share"
export RUSTUP_HOME="${RUSTUP_HOME:-/root/.rustup}" CARGO_HOME="${CARGO_HOME:-/root/.cargo}"
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
if ! rdma link add rxe0 type rxe netdev eth0 >"\$ctl/setup.log" 2>&1; then
  echo "rdma-vm guest: rdma link add failed: \$(cat "\$ctl/setup.log")"
  echo 125 >"\$ctl/rc"
  exit 0
fi
ibv_devices >>"\$ctl/setup.log" 2>&1
echo ready >"\$ctl/started"
cd "$(pwd -P)" || cd /
timeout -k 10 $timeout_s bash "\$ctl/cmd" >"\$ctl/out.log" 2>&1 </dev/null
echo \$? >"\$ctl/rc.tmp"
sync
mv "\$ctl/rc.tmp" "\$ctl/rc"
EOF
: >"$ctl/out.log"

log "booting kernel $kver ($n modules, ${mem} MiB, $cpus vCPUs, TCG), timeout ${timeout_s}s"
t0=$(date +%s)
qemu-system-x86_64 -accel tcg -cpu max -smp "$cpus" -m "$mem" -nodefaults -no-reboot \
  -display none -serial "file:$work/console.log" \
  -kernel "/boot/vmlinuz-$kver" -initrd "$work/initrd.gz" \
  -append "console=ttyS0 panic=-1 quiet loglevel=3 rdinit=/init" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$share,mount_tag=results,security_model=none,multidevs=remap" \
  -netdev user,id=n0,restrict=on -device virtio-net-pci,netdev=n0 &
qemu_pid=$!

# Stream the command's output while the guest runs; bound the whole guest in time.
tail -n +1 -F --pid="$qemu_pid" "$ctl/out.log" 2>/dev/null &
tail_pid=$!
limit=$((timeout_s + 120))
while kill -0 "$qemu_pid" 2>/dev/null; do
  if [ $(($(date +%s) - t0)) -gt "$limit" ]; then
    log "guest still running after ${limit}s: killing qemu (pid $qemu_pid)"
    kill -KILL "$qemu_pid" 2>/dev/null || true
    break
  fi
  sleep 1
done
wait "$qemu_pid" 2>/dev/null || true
qemu_pid=""
sleep 0.5
kill "$tail_pid" 2>/dev/null || true
wait "$tail_pid" 2>/dev/null || true

took=$(($(date +%s) - t0))
if [ -f "$ctl/rc" ]; then
  rc=$(cat "$ctl/rc")
  log "guest command exited with status $rc after ${took}s (boot included)"
  [ "$rc" = 124 ] && log "the command ran out of time (${timeout_s}s)"
  exit "$rc"
fi
log "the guest did not finish the command (${took}s); its console:"
tail -n 40 "$work/console.log" >&2 || true
[ -f "$ctl/setup.log" ] && cat "$ctl/setup.log" >&2
exit 125
