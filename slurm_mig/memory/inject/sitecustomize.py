"""mig-run's start-up hook, found first because mig-run puts this folder at the head of
PYTHONPATH. It runs any other ``sitecustomize`` on ``sys.path`` (so a site's own hook
still runs), then waits for the job to import torch and only then starts the memory
probe, in the job's main process: never in multiprocessing's spawned children (DataLoader
workers), never when ``$SLURM_MIG_PROBE_OUT`` is unset. It must not break the job: any
failure is one line on stderr and the job runs unprobed.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE_DIR = os.path.dirname(os.path.dirname(_HERE))  # .../slurm_mig


def _chain_load() -> None:
    """Execute the next ``sitecustomize`` on sys.path, as site.py would have."""
    import importlib.machinery
    import importlib.util

    paths = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", paths)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    ours = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # site.py reports a broken sitecustomize the same way
        sys.modules["sitecustomize"] = ours
        print(
            f"Error in sitecustomize ({spec.origin}): {type(exc).__name__}: {exc}", file=sys.stderr
        )


def _spawned_child() -> bool:
    argv = list(getattr(sys, "orig_argv", sys.argv))
    code = " ".join(argv)
    return (
        "--multiprocessing-fork" in argv
        or "multiprocessing.spawn" in code
        or "multiprocessing.forkserver" in code
    )


def _start_probe() -> None:
    try:
        if "slurm_mig" not in sys.modules:
            import importlib.util

            spec = importlib.util.spec_from_file_location(
                "slurm_mig",
                os.path.join(_PACKAGE_DIR, "__init__.py"),
                submodule_search_locations=[_PACKAGE_DIR],
            )
            module = importlib.util.module_from_spec(spec)
            sys.modules["slurm_mig"] = module
            spec.loader.exec_module(module)
        from slurm_mig.memory import probe

        probe.activate_from_env()
    except Exception as exc:
        print(f"mig-run: memory probe disabled: {type(exc).__name__}: {exc}", file=sys.stderr)


class _TorchImportHook:
    """A one-shot meta path finder: lets torch load normally, then starts the probe."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            try:
                original(module)
            finally:
                loader.__dict__.pop("exec_module", None)
            _start_probe()

        try:
            loader.exec_module = exec_module
        except AttributeError:  # a loader with __slots__: start the probe unhooked
            return None
        return spec


class _JaxNote:
    """Says once, when the job imports jax, that mig-run turned JAX's preallocation off
    (JAX takes 75 % of the device up front otherwise: the slice would look full at once)."""

    def find_spec(self, name, path=None, target=None):
        if name == "jax" and self in sys.meta_path:
            sys.meta_path.remove(self)
            print(
                "mig-run: JAX: XLA_PYTHON_CLIENT_PREALLOCATE=false, set by mig-run so that JAX "
                "allocates as it goes instead of 75 % of the slice at once; set "
                "XLA_PYTHON_CLIENT_PREALLOCATE yourself to choose",
                file=sys.stderr,
                flush=True,
            )
        return None


def _install() -> None:
    if os.environ.pop("SLURM_MIG_XLA_PREALLOCATE_SET", None) and not _spawned_child():
        sys.meta_path.insert(0, _JaxNote())
    if not os.environ.get("SLURM_MIG_PROBE_OUT") or _spawned_child():
        return
    if "torch" in sys.modules:
        _start_probe()
    else:
        sys.meta_path.insert(0, _TorchImportHook())


_chain_load()
_install()
