#!/usr/bin/env bash
# Build the Containerfile's image, and the node-problem-detector image on it, on a machine where
# no registry serves base images, then check what is in them. Root, with buildah and debootstrap
# (apt-get install -y buildah debootstrap); Debian's mirror and the Python index reachable.
#
#   bash tests/tools/build_image.sh [WORKDIR]        (default: a new temp dir, removed at the end)
#
# What stands in for what the Containerfile pulls:
# - BASE_IMAGE (debian:bookworm-slim): Debian bookworm made with debootstrap (minbase) from
#   Debian's mirror, committed as localhost/debian:bookworm-slim;
# - KUBECTL_BASE_URL (dl.k8s.io): this machine's own kubectl and its .sha256, served on
#   127.0.0.1 in dl.k8s.io's layout, so the stage's download and checksum check run for real;
# - NPD_IMAGE (registry.k8s.io's node-problem-detector): a stand-in with a stub binary at NPD's
#   paths (/node-problem-detector, /home/kubernetes/bin/, /config/).
# The machine's CA bundle is mounted into the build's RUN steps (and pip told to use it) where
# TLS to the index goes through a proxy with its own CA. Everything buildah stores lives under
# WORKDIR (vfs driver): nothing is left in /var/lib/containers.
set -euo pipefail
cd "$(dirname "$0")/../.."

work=${1:-}
if [ -z "$work" ]; then
  work=$(mktemp -d /var/tmp/nccl-runbook-image.XXXXXX)
  trap 'kill "${server:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
else
  mkdir -p "$work"
  trap 'kill "${server:-}" 2>/dev/null || true' EXIT
fi
bah=(buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs)
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' runbook/__init__.py)
image=registry.example.org/nccl-runbook:$version
npd_image=registry.example.org/nccl-runbook-npd:$version
kubectl_version=$(sed -n 's/^ARG KUBECTL_VERSION=//p' Containerfile)
step() { printf '== %s (%ss)\n' "$*" "$SECONDS"; }

step "base: debootstrap bookworm"
if [ ! -f "$work/rootfs/etc/debian_version" ]; then
  debootstrap --variant=minbase --include=ca-certificates bookworm "$work/rootfs" \
    http://deb.debian.org/debian > "$work/debootstrap.log"
fi
base=$("${bah[@]}" from scratch)
mnt=$("${bah[@]}" mount "$base")
cp -a "$work/rootfs/." "$mnt/"
"${bah[@]}" umount "$base" > /dev/null
"${bah[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$base"
"${bah[@]}" commit -q "$base" localhost/debian:bookworm-slim > /dev/null
"${bah[@]}" rm "$base" > /dev/null

step "kubectl $kubectl_version served on 127.0.0.1"
served="$work/kubectl/$kubectl_version/bin/linux/amd64"
mkdir -p "$served"
cp -L "$(command -v kubectl)" "$served/kubectl"
(cd "$served" && sha256sum kubectl | cut -d' ' -f1 > kubectl.sha256)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server "$port" --bind 127.0.0.1 --directory "$work/kubectl" > "$work/http.log" 2>&1 &
server=$!
for _ in $(seq 50); do curl -fsS -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null && break; sleep 0.1; done

mounts=()
ca=/etc/ssl/certs/ca-certificates.crt
if [ -f "$ca" ]; then
  printf '[global]\ncert = %s\n' "$ca" > "$work/pip.conf"
  mounts=(-v "$ca:$ca:ro" -v "$work/pip.conf:/etc/pip.conf:ro")
fi

step "build $image"
"${bah[@]}" build --isolation chroot --network host --pull=never --layers=false "${mounts[@]}" \
  --build-arg BASE_IMAGE=localhost/debian:bookworm-slim \
  --build-arg KUBECTL_BASE_URL="http://127.0.0.1:$port" \
  -f Containerfile -t "$image" . > "$work/build.log" 2>&1 \
  || { tail -40 "$work/build.log"; exit 1; }

step "check $image"
ctr=$("${bah[@]}" from --pull=never "$image")
"${bah[@]}" run --isolation chroot "$ctr" -- sh -ec '
  test "$(id -u)" = 10001
  runbook --version
  runbook setup-collections --check
  kubectl version --client | head -1
  python3 -c "import kubernetes"
  cd "$HOME" && runbook demo < /dev/null > /tmp/demo.out && tail -1 /tmp/demo.out
  python3 - <<EOF
import os, subprocess, sys, tempfile
from pathlib import Path
from runbook.remedies.playbook import content_dir, link_collection
content = content_dir()
env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": link_collection(content, Path(tempfile.mkdtemp()))}
for name in ("node-drain.yml", "shm-size-limit.yml"):
    proc = subprocess.run(["ansible-playbook", str(content / "playbooks" / name), "--syntax-check"],
                          env=env, capture_output=True, text=True)
    print(name, "syntax-check rc", proc.returncode)
    if proc.returncode:
        sys.exit(proc.stdout + proc.stderr)
EOF'
"${bah[@]}" rm "$ctr" > /dev/null

step "NPD stand-in, then build $npd_image"
stub=$("${bah[@]}" from scratch)
mnt=$("${bah[@]}" mount "$stub")
mkdir -p "$mnt/home/kubernetes/bin" "$mnt/config"
printf '#!/bin/sh\necho node-problem-detector stand-in "$@"\n' > "$mnt/node-problem-detector"
chmod 755 "$mnt/node-problem-detector"
cp "$mnt/node-problem-detector" "$mnt/home/kubernetes/bin/log-counter"
echo '{}' > "$mnt/config/kernel-monitor.json"
"${bah[@]}" umount "$stub" > /dev/null
"${bah[@]}" commit -q "$stub" localhost/node-problem-detector-stand-in:latest > /dev/null
"${bah[@]}" rm "$stub" > /dev/null
"${bah[@]}" build --isolation chroot --pull=never --layers=false \
  --build-arg NPD_IMAGE=localhost/node-problem-detector-stand-in:latest \
  -t "$npd_image" examples/node-problem-detector > "$work/npd-build.log" 2>&1 \
  || { tail -40 "$work/npd-build.log"; exit 1; }

step "check $npd_image"
ctr=$("${bah[@]}" from --pull=never "$npd_image")
"${bah[@]}" run --isolation chroot "$ctr" -- sh -ec '
  test "$(id -u)" = 0
  test -f /config/gpu-training-fault-monitor.json && test -f /config/kernel-monitor.json
  /opt/nccl-runbook/bin/runbook --version
  /opt/nccl-runbook/bin/runbook npd --help > /dev/null
  /node-problem-detector --logtostderr'
"${bah[@]}" rm "$ctr" > /dev/null
"${bah[@]}" images
step "done"
