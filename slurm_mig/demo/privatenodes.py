"""Nodes as hosts of their own (LocalSlurm's ``private_nodes``): where a node's own
copy of a node-local path lies on the host (``<root>/nodes/<node>/<name>``), the
command line that runs a program with those copies bind-mounted over the paths in a
mount namespace of its own, and the directories made for it."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from .processes import ClusterError


def node_path(root: Path, dirs: Sequence[Path], node: str, path: str | Path) -> Path:
    """Where ``path`` as node ``node`` sees it lies on the host: under the node's
    backing directory in ``root`` when ``path`` is under one of the node-local
    ``dirs``, else ``path`` itself."""
    path = Path(path)
    for d in dirs:
        if path == d or d in path.parents:
            return root / "nodes" / node / d.name / path.relative_to(d)
    return path


def node_argv(mounts: Sequence[tuple[Path, Path]], argv: Sequence[str]) -> list[str]:
    """``argv`` in a mount namespace of its own with each (backing, path) of
    ``mounts`` bind-mounted (``argv`` unchanged without mounts)."""
    if not mounts:
        return list(argv)
    lines = ["set -e"]
    for back, d in mounts:
        lines.append(f"mount --bind {shlex.quote(str(back))} {shlex.quote(str(d))}")
    lines.append('exec "$@"')
    return [
        "unshare", "--mount", "--propagation", "private",
        "/bin/sh", "-c", "\n".join(lines), "sh", *argv,
    ]  # fmt: skip


def make_private_dirs(root: Path, dirs: Sequence[Path], nodes: Sequence[str]) -> None:
    """Each path of ``dirs`` on the host (an empty mount point) and each node's
    directory for it (same mode and owner), under ``<root>/nodes/<node>/``."""
    names = [d.name for d in dirs]
    if len(set(names)) != len(names):
        raise ClusterError(f"node_dirs need distinct last components: {names}")
    for d in dirs:
        if not d.is_absolute() or d == root or d in root.parents:
            raise ClusterError(f"node_dirs: {d} must be absolute and not hold {root}")
        d.mkdir(parents=True, exist_ok=True)
        st = d.stat()
        for node in nodes:
            back = node_path(root, dirs, node, d)
            back.mkdir(parents=True, exist_ok=True)
            os.chmod(back.parent, 0o755)
            os.chmod(back, st.st_mode & 0o7777)
            os.chown(back, st.st_uid, st.st_gid)
    if dirs:
        os.chmod(root / "nodes", 0o755)
