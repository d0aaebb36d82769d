"""Apply one node's MIG layouts with NVML, on that node: the federation runs it as a Ray job
pinned to the node (`python -m providers.mig_agent --model A100-80GB --layouts '{"0": [...]}'`).
It prints the outcome as JSON and exits 0 on success, 1 on failure, so the job's status is it."""

from __future__ import annotations

import argparse
import json
import sys

from providers.mig_backends import NvmlBackend


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="providers.mig_agent")
    ap.add_argument("--model", required=True)
    ap.add_argument("--layouts", required=True, help='JSON: {"gpu index": [[profile, start], ...]}')
    a = ap.parse_args(argv)
    layouts = {int(g): [(p, int(s)) for p, s in insts] for g, insts in json.loads(a.layouts).items()}
    backend = NvmlBackend(a.model)
    backend.apply("here", layouts)
    st = backend.state("here", layouts)
    print(json.dumps({"state": st.state, "message": st.message}))
    return 0 if st.state == "success" else 1


if __name__ == "__main__":
    sys.exit(main())
