"""One local sweep worker: ``python -m zoo.worker <run_dir>`` trains ``<run_dir>/config.yaml`` and
writes ``<run_dir>/result.json`` atomically. The sweep process starts it, one per run."""
from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf


def main(run_dir: str) -> int:
    from zoo.config import make_run_config
    from zoo.results import write_json_atomic
    from zoo.run import train

    run_dir = Path(run_dir)
    cfg = make_run_config(OmegaConf.load(run_dir / "config.yaml"))
    record = train(cfg, run_dir, quiet=True)
    write_json_atomic(run_dir / "result.json", record)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
