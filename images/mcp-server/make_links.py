"""Build step of the sidecar image (images/mcp-server/Dockerfile): the catalog entry's ``links``.

Some npm packages download a binary in their install script (``@vscode/ripgrep`` fetches ``rg``
from GitHub); the image build is offline, so the catalog names a run-time command to link there
instead (``links: {node_modules/@vscode/ripgrep/bin/rg: rg}``, paths under the package as it was
installed). Reads ``/opt/server/server.json``; a command missing from the image fails the build.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

SPEC = os.environ.get("ATLAS_SIDECAR_SPEC", "/opt/server/server.json")


def main() -> int:
    with open(SPEC, encoding="utf-8") as fh:
        spec = json.load(fh)
    package = os.path.join(spec["install_dir"], "lib", "node_modules", spec["package"]["name"])
    for rel, command in (spec.get("links") or {}).items():
        found = shutil.which(command)
        if found is None:
            print(
                f"make_links: no {command!r} in the image for {rel} (add its Debian package)", file=sys.stderr
            )
            return 1
        path = os.path.join(package, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.lexists(path):
            os.remove(path)
        os.symlink(found, path)
        print(f"make_links: {path} -> {found}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
