"""Build Barge's OCI image here, with no Docker and no registry: `make image`.

Why: the chart runs an image, and the only honest test of the chart is a Pod running that image on a real node
(tools/localcluster.py up --node). Docker does not run here and nothing may be pulled from a registry, so:

1. the base is a Debian bookworm root filesystem made by mmdebstrap from the Debian packages apt already uses
   (the host's own apt sources), with Python 3.11 from Debian, imported into podman as
   localhost/debian-python:3.11-bookworm;
2. the unchanged Dockerfile is built by podman with that base swapped in by its PYTHON_IMAGE build argument
   (the release build keeps the published python:3.11-slim: same Python minor version, same hash-checked pins of
   requirements.lock, same layout under /opt/barge);
3. the image is saved as an OCI archive under ~/.cache/barge/image, keyed by a hash of everything that goes into
   it, and that is what the node's containerd imports.

podman gets a configuration of its own (CONTAINERS_CONF, CONTAINERS_STORAGE_CONF): the host's network namespace
for every RUN step (never Debian's 10.88.0.0/16 bridge), rlimits the sandbox allows, runc, and storage under the
cache. The host's CA bundle is mounted into the build for TLS to the package index; nothing is baked in.

Usage (stdlib only):
    python3 tools/image.py build      # build or reuse; prints the archive path and the image's size
    python3 tools/image.py archive    # the archive path of the current sources (built or not)
    python3 tools/image.py podman ARGS...   # podman with this configuration (e.g. `run --rm localhost/barge:dev`)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parent
CACHE = Path(os.environ.get("BARGE_CACHE", Path.home() / ".cache" / "barge")) / "image"
TAG = "localhost/barge:dev"
BASE_TAG = "localhost/debian-python:3.11-bookworm"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# Python 3.11 from Debian (python-is-python3: the Dockerfile calls `python`); documentation, manual pages and
# locales are not installed, nor the apt lists.
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
BASE_EXCLUDES = (
    "/usr/share/doc/*",
    "/usr/share/man/*",
    "/usr/share/locale/*",
    "/usr/share/info/*",
)
# Removed after the packages are set up (a path-exclude would fail their postinst: libc-bin's runs iconvconfig,
# python3.11's byte-compiles the standard library): glibc's iconv modules (8.4 MB: Python's codecs are its own,
# and libpq, SQLite and OpenSSL convert nothing through iconv; UTF-8 and ASCII are built into glibc), the 2to3 tool
# and help()'s topic texts (2.2 MB: nothing in an image that runs a service imports them).
BASE_REMOVED = ("/usr/lib/*/gconv", "/usr/lib/python3.11/lib2to3", "/usr/lib/python3.11/pydoc_data")
APT_ONLY = (
    "apt",
    "libapt-pkg6.0",
    "gpgv",
    "debian-archive-keyring",
    "libgnutls30",
    "libhogweed6",
    "libnettle8",
    "libp11-kit0",
    "libtasn1-6",
    "libunistring2",
    "libidn2-0",
    "libseccomp2",
    "libxxhash0",
    # not libstdc++6: apt's, but also the C++ runtime of wheels (google-re2 under cel-python, the cascade's CEL);
    # purged, the operator crash-looped on the node with "ImportError: libstdc++.so.6"
)
DEBIAN_PACKAGES = ("mmdebstrap", "podman", "buildah", "uidmap", "fuse-overlayfs")

CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
netns = "host"
[engine]
runtime = "runc"
"""


def _apt_sources() -> list[str]:
    """The host's apt source files, handed to mmdebstrap as they are (it reads a file given as a mirror)."""
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    found = [str(f) for f in files if f.is_file() and f.suffix in {".list", ".sources"} and f.stat().st_size]
    if not found:
        sys.exit("no apt sources found under /etc/apt: mmdebstrap needs the Debian mirror apt uses")
    return found


def _hash(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:12]


def _sources_hash() -> str:
    files = [REPO / "Dockerfile", REPO / "requirements.lock", TOOLS / "runtime_requirements.py", Path(__file__)]
    files += sorted(p for p in (REPO / "operator" / "barge").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return _hash(*(p.relative_to(REPO).as_posix().encode() + b"\0" + p.read_bytes() for p in files))


def archive_path() -> Path:
    return CACHE / f"barge-{_sources_hash()}.oci.tar"


def latest_archive() -> Path | None:
    """The archive of the current sources if built, else the newest one built (BARGE_IMAGE_ANY=1 only), else
    None: a node never runs an image older than the code unless asked to."""
    current = archive_path()
    if current.exists():
        return current
    if os.environ.get("BARGE_IMAGE_ANY") == "1":
        built = sorted(CACHE.glob("barge-*.oci.tar"), key=lambda p: p.stat().st_mtime)
        return built[-1] if built else None
    return None


def _env() -> dict[str, str]:
    CACHE.mkdir(parents=True, exist_ok=True)
    conf = CACHE / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    storage = CACHE / "storage.conf"
    storage.write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{CACHE / "storage"}"\nrunroot = "{CACHE / "run"}"\n'
    )
    return {**os.environ, "CONTAINERS_CONF": str(conf), "CONTAINERS_STORAGE_CONF": str(storage)}


def _run(args: list[str], env: dict[str, str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, check=True, text=True, **kwargs)  # type: ignore[call-overload, no-any-return]


def _has_image(tag: str, env: dict[str, str]) -> bool:
    found = subprocess.run(["podman", "image", "exists", tag], env=env, check=False)
    return found.returncode == 0


def _require_tools() -> None:
    missing = [tool for tool in ("mmdebstrap", "podman") if not shutil.which(tool)]
    if missing:
        sys.exit(f"missing {', '.join(missing)}: run `make deps` (installs {' '.join(DEBIAN_PACKAGES)})")


def build_base(env: dict[str, str]) -> None:
    """The Debian bookworm base with Python 3.11, made once and kept in podman's storage under the cache."""
    args = [
        "mmdebstrap",
        "--variant=minbase",
        "--quiet",
        # merged /usr by mmdebstrap's own hook (the usr-is-merged marker), not the usrmerge package, which pulls
        # in perl (50 MB)
        "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
        f"--include={','.join(BASE_PACKAGES)}",
        *(f"--dpkgopt=path-exclude={pattern}" for pattern in BASE_EXCLUDES),
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
        # no package manager in an image that runs: apt and what only apt needs go (dpkg refuses to remove
        # anything another package still depends on)
        f"--customize-hook=chroot $1 dpkg --purge {' '.join(APT_ONLY)}",
        "--customize-hook=rm -rf $1/var/lib/apt/lists/* $1/var/cache/apt/* $1/var/log/apt",
        "--customize-hook=rm -rf " + " ".join(f"$1{path}" for path in BASE_REMOVED),
        "bookworm",
    ]
    marker = CACHE / f"base-{_hash(repr(args).encode())}"
    if marker.exists() and _has_image(BASE_TAG, env):
        return
    started = time.monotonic()
    rootfs = CACHE / "rootfs.tar"
    print("building the Debian bookworm base with mmdebstrap (first time only) ...", flush=True)
    _run([*args, str(rootfs), *_apt_sources()], env)
    _run(
        [
            "podman",
            "import",
            "--change",
            'CMD ["python3"]',
            "--change",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            str(rootfs),
            BASE_TAG,
        ],
        env,
        stdout=subprocess.DEVNULL,
    )
    rootfs.unlink()
    marker.touch()
    print(f"base {BASE_TAG} in {time.monotonic() - started:.0f}s", flush=True)


def image_size(env: dict[str, str], tag: str = TAG) -> int:
    out = _run(["podman", "image", "inspect", tag], env, capture_output=True).stdout
    return int(json.loads(out)[0]["Size"])


def build() -> Path:
    archive = archive_path()
    if archive.exists():
        print(f"image archive (cached): {archive}", flush=True)
        return archive
    _require_tools()
    env = _env()
    build_base(env)
    started = time.monotonic()
    print(f"building {TAG} from the Dockerfile (base {BASE_TAG}) ...", flush=True)
    _run(
        [
            "podman",
            "build",
            "--network",
            "host",
            "--volume",
            f"{CA_BUNDLE}:{CA_BUNDLE}:ro",
            "--build-arg",
            f"PYTHON_IMAGE={BASE_TAG}",
            "--tag",
            TAG,
            "--quiet",
            str(REPO),
        ],
        env,
        stdout=subprocess.DEVNULL,
    )
    for old in CACHE.glob("barge-*.oci.tar"):
        old.unlink()
    tmp = archive.with_suffix(".tmp")
    _run(["podman", "save", "--format", "oci-archive", "--output", str(tmp), TAG], env)
    tmp.rename(archive)
    subprocess.run(["podman", "image", "prune", "--force"], env=env, check=False, capture_output=True)
    size = image_size(env)
    print(
        f"built {TAG} in {time.monotonic() - started:.0f}s: {size / 1e6:.0f} MB unpacked, "
        f"{archive.stat().st_size / 1e6:.0f} MB archive -> {archive}",
        flush=True,
    )
    return archive


def podman_env() -> dict[str, str]:
    """The environment podman needs to see the image `build` made (for tests that run it)."""
    return _env()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["build", "archive", "podman"])
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.command == "podman":
        os.execvpe("podman", ["podman", *args.args], podman_env())  # noqa: S606 - a fixed program, the caller's arguments
    if args.command == "build":
        print(build())
    else:
        print(archive_path())


if __name__ == "__main__":
    main()
