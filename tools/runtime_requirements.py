"""Print the runtime part of requirements.lock: what `barge` needs in its image, without the dev tools.

Why: the lock (`make lock`) pins runtime and dev dependencies together, with hashes. The image must install
exactly those pins (`pip install --require-hashes`) but not pytest, mypy, moto and the like. uv writes, under
each pin, which packages pulled it in (`# via ...`); the runtime set is everything reachable from the
project's own dependencies (`barge-operator (pyproject.toml)`), never from its dev group. Stdlib only: it runs
in the image's build stage before anything is installed.

Usage: python3 tools/runtime_requirements.py requirements.lock > runtime.lock
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = "barge-operator (pyproject.toml)"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==")


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def parse(text: str) -> dict[str, tuple[list[str], set[str]]]:
    """Package -> (its lines in the lock, the packages it is `via`)."""
    entries: dict[str, tuple[list[str], set[str]]] = {}
    current = ""
    in_via = False
    for line in text.splitlines():
        pin = _PIN.match(line)
        if pin:
            current = _name(pin.group(1))
            entries[current] = ([line], set())
            in_via = False
            continue
        if not current:
            continue
        stripped = line.strip()
        if stripped.startswith("--hash") or (stripped.endswith("\\") and not stripped.startswith("#")):
            entries[current][0].append(line)
        elif stripped == "# via":
            in_via = True
        elif stripped.startswith("# via "):
            entries[current][1].add(stripped[len("# via ") :])
            in_via = False
        elif in_via and stripped.startswith("#   "):
            entries[current][1].add(stripped[len("#   ") :])
    return entries


def runtime(text: str) -> list[str]:
    """The lock's runtime packages (their pins and hashes), in the lock's order."""
    entries = parse(text)
    keep = {name for name, (_, via) in entries.items() if ROOT in via}
    while True:
        more = {name for name, (_, via) in entries.items() if name not in keep and {_name(v) for v in via} & keep}
        if not more:
            break
        keep |= more
    return [line for name, (lines, _) in entries.items() if name in keep for line in lines]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    print("\n".join(runtime(Path(argv[0]).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
