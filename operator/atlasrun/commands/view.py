"""``atlas view [DIR...]``: a live local web page of runs (atlasrun.reports.view).

It lists the results directories found (each DIR is one, or a folder of them; default ./runs),
and for each shows progress, pass rate with its interval, errors by kind and cost, updated while
``atlas run`` writes; a run's page opens each task's transcript and claim verdicts. Served from
127.0.0.1 by the standard library until Ctrl-C (exit 130).
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any

DEFAULT_ROOT = Path("runs")


def _roots(dirs: list[str]) -> list[Path]:
    from atlasrun.errors import InputError

    if not dirs:
        if not DEFAULT_ROOT.is_dir():
            raise InputError(
                "no DIR given and ./runs is not a directory here: name a results directory "
                "(atlas view runs/demo) or a folder of them",
                where="atlas view",
            )
        return [DEFAULT_ROOT]
    roots = []
    for name in dict.fromkeys(dirs):
        path = Path(name)
        if not path.exists():
            raise InputError("directory not found", where=name)
        if not path.is_dir():
            raise InputError(
                "not a directory: give a results directory of `atlas run`, or a folder of them", where=name
            )
        roots.append(path)
    return roots


def _open_browser(url: str) -> None:
    import webbrowser

    try:
        webbrowser.open(url)
    except Exception:  # no browser here: the URL is printed anyway
        pass


def cmd_view(args: argparse.Namespace) -> int:
    from atlasrun.errors import EXIT_INTERRUPTED, EXIT_OK
    from atlasrun.reports.view.server import make_server

    roots = _roots(args.dirs)
    server = make_server(roots, args.port)
    try:
        print(f"atlas view: {server.url}", flush=True)
        print(
            f"watching {', '.join(str(r) for r in roots)}: {len(server.view.runs())} run(s) now, new ones "
            "appear as they start; Ctrl-C to stop",
            file=sys.stderr,
            flush=True,
        )
        if not args.no_open:  # in a thread: a console browser must not hold up serving
            threading.Thread(target=_open_browser, args=(server.url,), daemon=True).start()
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        print("atlas view: stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        server.server_close()
    return EXIT_OK


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "view",
        help="a live local web page of runs: progress, pass rates, errors, transcripts",
    )
    parser.add_argument(
        "dirs",
        nargs="*",
        metavar="DIR",
        help="a results directory of `atlas run`, or a folder of them (default: ./runs)",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one, printed)"
    )
    parser.add_argument("--no-open", action="store_true", help="only print the URL; do not open a browser")
    parser.set_defaults(func=cmd_view)
