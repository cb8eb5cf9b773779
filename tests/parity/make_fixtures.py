"""Write the parity fixtures from the reference implementations: ``python tests/parity/make_fixtures.py [name ...]``.

Each ``tests/parity/make_<name>.py`` defines ``make() -> None`` that imports its reference from
``third_party/`` (git-ignored; checkouts named in its docstring) and calls ``fixtures.save_fixture``.
Nothing here runs in CI: the fixtures it writes are committed, the references are not.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

HERE = Path(__file__).parent


def main(names: list[str]) -> int:
    sys.path.insert(0, str(HERE))
    available = sorted(p.stem.removeprefix("make_") for p in HERE.glob("make_*.py") if p.stem != "make_fixtures")
    for name in names or available:
        if name not in available:
            print(f"error: fixture set {name!r} is not valid: expected one of {', '.join(available)}", file=sys.stderr)
            return 2
        importlib.import_module(f"make_{name}").make()
        print(f"wrote fixtures of {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
