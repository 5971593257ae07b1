#!/usr/bin/env bash
# Runs COMMAND in this checkout inside a QEMU guest with a real kernel RDMA stack: Debian 12's
# kernel with soft-RoCE (rdma_rxe, device rxe0), Debian's rdma-core and RDMA programs, and
# sigmatrace set up by scripts/setup.sh.  Prints the command's output and exits with its status;
# with no COMMAND it opens a shell in the guest (Ctrl-A x quits QEMU).
#
#   bash scripts/rxe-guest.sh                                  # a shell on the guest
#   bash scripts/rxe-guest.sh .venv/bin/sigmatrace doctor      # one command, its exit status
#
# The guest image is built once (about 4 minutes) into /var/cache/sigmatrace-rxe/HASH, HASH being
# that of its inputs (the build steps here, scripts/setup.sh, pyproject.toml, the package list):
# a fresh clone on the same machine boots it.  Each boot copies the checkout's files (tracked and
# untracked-but-not-ignored) into the guest on a second disk, so edits need no rebuild; C sources
# changed since the image was built are rebuilt at boot.  The guest disk is a snapshot: nothing
# written in the guest persists.  Runs as root on Debian 12 and installs what it needs.
# QEMU runs under KVM where a probe shows a KVM guest's kernel starts, else under software
# emulation (TCG).  Environment: RXE_ACCEL (auto, kvm, tcg), RXE_TIMEOUT (seconds for one boot,
# default 1800), RXE_MEM (MiB, default 3072), RXE_CPUS (default 2), RXE_CACHE (the image cache),
# RXE_KVM_START (seconds a KVM guest has to reach its init before TCG is tried, default 120).
set -euo pipefail
cd "$(dirname "$0")/.."
CHECKOUT=$PWD
# Built images, one folder per hash of their inputs: outside the checkout, so that a fresh clone
# on the same machine (CI) boots the image an earlier run built from the same inputs.
CACHE=${RXE_CACHE:-/var/cache/sigmatrace-rxe}
MIRROR=${RXE_MIRROR:-http://deb.debian.org/debian}
GUEST_SRC=/opt/sigmatrace

HOST_PACKAGES=(debootstrap qemu-system-x86 e2fsprogs git ca-certificates)
# Debian's kernel, rdma-core and RDMA programs; scripts/setup.sh adds what sigmatrace needs.
GUEST_PACKAGES=(
  linux-image-amd64 initramfs-tools kmod iproute2 procps
  rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest ucx-utils libfabric-bin
  python3 python3-venv git ca-certificates
)

die() { echo "rxe-guest: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap, chroot and apt need it)"

install_host_packages() {
  local missing=() p
  for p in "${HOST_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  echo "rxe-guest: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# What the image is made from: the build steps below, scripts/setup.sh, pyproject.toml (the
# Python dependencies setup.sh installs) and the package list
# (the guest's init comes with each boot, so changing it needs no rebuild).
inputs_hash() {
  { declare -f build_image checkout_files; cat "$CHECKOUT/scripts/setup.sh" "$CHECKOUT/pyproject.toml"
    printf '%s\n' "$MIRROR" "${GUEST_PACKAGES[@]}"; } | sha256sum | cut -d' ' -f1
}

# The files a boot carries into the guest: tracked and untracked-but-not-ignored.
checkout_files() {
  git -C "$CHECKOUT" ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
    [ -e "$CHECKOUT/$f" ] && printf '%s\0' "$f"
  done
}

# The guest's init, carried on the boot disk (the image's /sbin/rxe-init starts it): mounts, the
# rxe0 device, the checkout sync, then the command (or a shell); its status goes out on the
# serial console, then the guest resets (QEMU exits: -no-reboot).
write_guest_init() {
  cat > "$1" <<'EOF'
#!/bin/bash
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=${TERM:-linux}
# the initramfs hands over /proc, /sys, /dev (and /run) already mounted
mnt() { mountpoint -q "$3" || mount -t "$1" "$2" "$3"; }
mnt proc proc /proc; mnt sysfs sys /sys; mnt devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm; mnt devpts devpts /dev/pts; mnt tmpfs tmpfs /dev/shm
mnt tmpfs tmpfs /tmp; mnt tmpfs tmpfs /run
echo 1 > /proc/sys/kernel/printk
echo "@@rxe-begin@@"   # the host prints from here on: the init's own errors, then the command's output
hostname rxe-guest; ip link set lo up
# debootstrap writes no /etc/hosts: "localhost" went to DNS, unreachable here (EAI_AGAIN), and
# libfabric's verbs provider resolves it (fi_pingpong -e msg failed, -e dgram never exited)
printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.1.1\trxe-guest\n' > /etc/hosts
# The serial line is slow to drain: wait before the reset, or the status line is lost.
finish() { sync; echo "@@rxe-status=$1@@"; sleep 2; echo b > /proc/sysrq-trigger; sleep 60; }
setup_rxe() {
  modprobe rdma_rxe && modprobe ib_uverbs && modprobe rdma_ucm || return 1
  modprobe dummy numdummies=0 && ip link add dummy0 type dummy && ip addr add 10.77.0.1/24 dev dummy0 && ip link set dummy0 up || return 1
  rdma link add rxe0 type rxe netdev dummy0 || return 1
  for _ in $(seq 50); do
    ibv_devinfo -d rxe0 2>/dev/null | grep -q PORT_ACTIVE && return 0; sleep 0.2
  done
  return 1
}
setup_rxe || { echo "rxe-guest: rxe0 did not come up" >&2; finish 125; }
# The checkout as it is now (on the boot disk, unpacked in /run/sync by /sbin/rxe-init) over the
# one built into the image; files gone since are removed.
cd SRC_DIR
(cd /run/sync/src && find . -type f -o -type l | sort) > /run/sync/manifest
comm -23 .rxe-manifest /run/sync/manifest | while IFS= read -r f; do rm -f -- "$f"; done
cp -a /run/sync/src/. . && cp /run/sync/manifest .rxe-manifest
.venv/bin/python native/build.py >/run/sync/build.log 2>&1 || { cat /run/sync/build.log; finish 125; }
if [ -s /run/sync/command ]; then
  bash /run/sync/command </dev/null 2>&1; st=$?
  finish $st
fi
echo "rxe-guest: shell on the guest (rxe0 up, checkout in $PWD); exit powers off"
setsid -c bash -l </dev/ttyS0 >/dev/ttyS0 2>&1
finish 0
EOF
  sed -i "s|SRC_DIR|$GUEST_SRC|" "$1"
  chmod 755 "$1"
}

# What build_image binds into the root, unmounted whichever way the build ends (also what an
# earlier build that was killed left mounted): nothing may ever delete through them.
BIND_MOUNTS=(var/cache/apt/archives root/.cache/pip dev/pts dev sys proc)
unmount_root() {
  local m
  for m in "${BIND_MOUNTS[@]}"; do
    while mountpoint -q "$root/$m" 2>/dev/null; do umount "$root/$m" || umount -l "$root/$m"; done
  done
}

# Builds the image into $IMAGE (under the cache's lock: one build at a time).
build_image() {
  local work=$CACHE/build
  root=$work/root   # global: the EXIT trap below needs it
  mkdir -p "$work"
  echo "rxe-guest: building the guest image (debootstrap, packages, scripts/setup.sh)" >&2
  local include; include=$(IFS=,; echo "${GUEST_PACKAGES[*]}")
  unmount_root
  trap unmount_root EXIT
  trap 'exit 143' TERM INT HUP
  mkdir -p /var/cache/apt/archives
  # A root debootstrapped with the same packages by an earlier, failed build is used again.
  if [ "$(cat "$work/debootstrap.ok" 2>/dev/null)" != "$include" ]; then
    rm -rf --one-file-system "$root" "$work/debootstrap.ok"
    debootstrap --variant=minbase --cache-dir=/var/cache/apt/archives --include="$include" \
      bookworm "$root" "$MIRROR" > "$work/debootstrap.log" 2>&1 \
      || { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed (log: $work/debootstrap.log)"; }
    echo "$include" > "$work/debootstrap.ok"
  fi
  mount --bind /proc "$root/proc"; mount --bind /sys "$root/sys"
  mount --bind /dev "$root/dev"; mount --bind /dev/pts "$root/dev/pts"
  mount --bind /var/cache/apt/archives "$root/var/cache/apt/archives"
  mkdir -p /root/.cache/pip "$root/root/.cache/pip"; mount --bind /root/.cache/pip "$root/root/.cache/pip"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  # pip in the root reaches PyPI the way the host does: its configuration and CA certificates.
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  [ -f /etc/pip.conf ] && cp /etc/pip.conf "$root/etc/pip.conf"
  [ -f /root/.config/pip/pip.conf ] && mkdir -p "$root/root/.config/pip" && cp /root/.config/pip/pip.conf "$root/root/.config/pip/"
  local pipenv; pipenv=$(env | grep -E '^PIP_[A-Z_]+=' || true)
  printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"; chmod 755 "$root/usr/sbin/policy-rc.d"
  rm -rf "$root$GUEST_SRC"; mkdir -p "$root$GUEST_SRC"
  checkout_files | tar --null -T - -cf - | tar -xf - -C "$root$GUEST_SRC"
  (cd "$root$GUEST_SRC" && find . -type f -o -type l | sort) > "$root$GUEST_SRC/.rxe-manifest"
  # shellcheck disable=SC2086  # PIP_* assignments, one per word
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root $pipenv \
    bash -c "cd $GUEST_SRC && bash scripts/setup.sh" > "$work/setup.log" 2>&1 \
    || { tail -20 "$work/setup.log" >&2; die "scripts/setup.sh failed in the guest root (log: $work/setup.log)"; }
  unmount_root
  trap - EXIT TERM INT HUP
  rm -f "$root/usr/sbin/policy-rc.d"
  cat > "$root/sbin/rxe-init" <<'INIT'
#!/bin/bash
# Unpacks the boot disk scripts/rxe-guest.sh made and runs the init on it.
mountpoint -q /run || mount -t tmpfs tmpfs /run
mkdir -p /run/sync && tar -xf /dev/vdb -C /run/sync && exec /bin/bash /run/sync/init
echo "rxe-guest: no boot disk" >&2; sleep 2; echo b > /proc/sysrq-trigger
INIT
  chmod 755 "$root/sbin/rxe-init"
  cp "$root"/boot/vmlinuz-* "$work/vmlinuz"; cp "$root"/boot/initrd.img-* "$work/initrd"
  local mb; mb=$(du -sm "$root" | cut -f1)
  mkfs.ext4 -q -F -L rxe-root -d "$root" "$work/guest.img" "$((mb + 2048))M"
  rm -rf --one-file-system "$root" "$work/debootstrap.ok"
  rm -rf "$IMAGE.new"; mkdir -p "$IMAGE.new"
  mv "$work/guest.img" "$work/vmlinuz" "$work/initrd" "$IMAGE.new/"
  mv "$IMAGE.new" "$IMAGE"
  echo "rxe-guest: image built ($((mb + 2048)) MiB, $IMAGE)" >&2
}

# Keeps this image and the one used most recently before it; older ones go (4-7 GB each).
prune_images() {
  local d n=0
  while IFS= read -r d; do
    [ "$d" = "$IMAGE" ] && continue
    n=$((n + 1)); [ "$n" -gt 1 ] && rm -rf --one-file-system "$d"
  done < <(find "$CACHE" -mindepth 1 -maxdepth 1 -type d -regex '.*/[0-9a-f]\{64\}' -printf '%T@ %p\n' | sort -rn | cut -d' ' -f2-)
}

# Whether a KVM guest gets as far as the kernel here: the guest's kernel alone, printing on the
# serial console from its first instructions, must say "Linux version" within 15 s.  (Where
# /dev/kvm opens and runs real-mode code but a guest hangs on entering protected mode, it never
# does; under TCG the same takes about 10 s.)
kvm_works() {
  [ -r /dev/kvm ] && [ -w /dev/kvm ] || return 1
  timeout 15 qemu-system-x86_64 -accel kvm -cpu host -m 256 -no-reboot -kernel "$IMAGE/vmlinuz" \
    -append "console=ttyS0 earlyprintk=serial,ttyS0,115200 panic=-1" -display none -monitor none \
    -serial stdio </dev/null 2>/dev/null | grep -a -q -m1 "Linux version"
}

# Runs the guest under accelerator $1 (kvm or tcg) with the qemu command line in QEMU, its
# console into $LOG; what the command prints goes to stdout.  Returns 3 when a KVM guest did not
# reach its init within RXE_KVM_START seconds (default 120), having stopped it: the caller
# falls back to TCG.
run_guest() {
  local accel=(-accel tcg,thread=multi -cpu max) pidfile runner t=0
  # -cpu host under KVM; under TCG -cpu max: with QEMU's default CPU model Python with numpy and
  # Frida dies of SIGILL
  [ "$1" = kvm ] && accel=(-accel kvm -cpu host)
  # rxe_accel: what the guest's programs may ask of their CPUs (tests/rxe/guest_programs.py)
  accel+=(-append "$APPEND rxe_accel=$1")
  pidfile=$(mktemp -u)
  : > "$LOG"
  # --foreground: QEMU stays in this script's process group, so that stopping the group (the
  # tests' timeout does) stops QEMU too
  ( timeout --foreground "${RXE_TIMEOUT:-1800}" "${QEMU[@]}" "${accel[@]}" -pidfile "$pidfile" -display none \
      -monitor none -serial stdio </dev/null 2>&1 | sed -u 's/\r//g' > "$LOG" ) &
  runner=$!
  if [ "$1" = kvm ]; then
    until grep -q '^@@rxe-begin@@$' "$LOG"; do
      if ! kill -0 "$runner" 2>/dev/null || [ "$t" -ge "${RXE_KVM_START:-120}" ]; then
        [ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null
        wait "$runner" || true
        echo "rxe-guest: the KVM guest did not start in ${t} s; its console ends:" >&2
        tail -5 "$LOG" >&2; rm -f "$pidfile"
        return 3
      fi
      sleep 1; t=$((t + 1))
    done
  fi
  tail -n +1 -f --pid="$runner" "$LOG" \
    | sed -u -n '/^@@rxe-begin@@$/,/^@@rxe-status=[0-9]*@@$/{/^@@rxe-\(begin\|status=[0-9]*\)@@$/!p}'
  wait "$runner" || true
  rm -f "$pidfile"
}

boot() {
  local cmdfile=$1 disk stage
  stage=$(mktemp -d); disk=$(mktemp --suffix=.tar)
  cp "$cmdfile" "$stage/command"
  write_guest_init "$stage/init"
  tar -cf "$disk" -C "$stage" command init
  (cd "$CHECKOUT" && checkout_files | tar --null -T - -rf "$disk" --transform 's,^,src/,')
  local accel=${RXE_ACCEL:-auto}
  if [ "$accel" = auto ]; then
    accel=tcg; kvm_works && accel=kvm
  fi
  echo "rxe-guest: booting under $accel" >&2
  # no_timer_check: under a loaded host the kernel's IO-APIC timer check can fail and panic it
  # at boot; panic=-1: a panic resets the guest (QEMU exits) instead of hanging until the timeout
  APPEND="root=/dev/vda rw console=ttyS0 init=/sbin/rxe-init quiet loglevel=1 mitigations=off no_timer_check panic=-1"
  QEMU=(nice -n 5 qemu-system-x86_64 -m "${RXE_MEM:-3072}" -smp "${RXE_CPUS:-2}"
    -no-reboot -kernel "$IMAGE/vmlinuz" -initrd "$IMAGE/initrd"
    -drive "file=$IMAGE/guest.img,format=raw,if=virtio,snapshot=on"
    -drive "file=$disk,format=raw,if=virtio,readonly=on")
  if [ ! -s "$cmdfile" ]; then
    local a=(-accel tcg,thread=multi -cpu max)
    [ "$accel" = kvm ] && a=(-accel kvm -cpu host)
    "${QEMU[@]}" "${a[@]}" -append "$APPEND rxe_accel=$accel" -nographic
    rm -rf "$stage" "$disk"
    return 0
  fi
  # Serial console to a file: only what the command printed goes to stdout, then its status.
  LOG=$(mktemp)
  local r=0
  run_guest "$accel" || r=$?
  if [ "$r" -eq 3 ]; then
    echo "rxe-guest: booting under tcg instead" >&2
    run_guest tcg || true
  fi
  local st
  st=$(sed -n 's/^@@rxe-status=\([0-9]*\)@@$/\1/p' "$LOG" | tail -1)
  if [ -z "$st" ]; then
    echo "rxe-guest: the guest ended without a status (timeout or crash); its console:" >&2
    tail -40 "$LOG" >&2; st=125
  fi
  rm -rf "$LOG" "$stage" "$disk"
  return "$st"
}

main() {
  install_host_packages
  mkdir -p "$CACHE"
  IMAGE=$CACHE/$(inputs_hash)
  # Build and prune under an exclusive lock, boot under a shared one: a boot never loses its image.
  exec 9>"$CACHE/lock"
  flock 9
  [ -f "$IMAGE/guest.img" ] || build_image
  touch "$IMAGE"   # most recently used
  prune_images
  flock -s 9
  local cmdfile st=0
  cmdfile=$(mktemp)
  [ $# -gt 0 ] && printf '%q ' "$@" > "$cmdfile"
  boot "$cmdfile" || st=$?
  rm -f "$cmdfile"
  return "$st"
}

main "$@"; exit  # one line: bash has read all of it before it runs, so an edit meanwhile is harmless
