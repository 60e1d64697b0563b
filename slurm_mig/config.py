"""The slurm-mig configuration file: one TOML file shared by the planner and the hooks.

Read with stdlib ``tomllib`` and checked against ``geometry`` only, because the prolog,
epilog and TaskProlog import this module on every job. Every problem is reported with
the file, the ``section.key`` and what to write instead; ``check_config`` lists them
all, ``load_config`` raises one ``ConfigError`` carrying all of them.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from . import hostlist
from .geometry import ALIASES, MODELS, GeometryError, get_model


def _close(word: str, options: list, n: int = 1) -> list[str]:
    """Nearest spellings (difflib is imported only on this error path: hooks stay light)."""
    import difflib

    return difflib.get_close_matches(word, options, n=n)


DEFAULT_CONFIG_PATH = Path("/etc/slurm-mig/config.toml")
DEFAULT_KEY_FILE = Path("/etc/slurm-mig/key")
CONFIG_ENV = "SLURM_MIG_CONFIG"
EXAMPLE_CONFIG = "DIR/config.toml"  # written by 'slurm-mig site-files DIR'
BACKENDS = ("nvml", "simulated")
NODE_TOKEN = "%n"  # expanded to the node name in run_dir and simulated_dir
MAX_CONFIG_BYTES = 1 << 20  # a config file is a few KiB


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names file, field and fix."""

    def __init__(self, problems: str | list[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class Config:
    """The validated configuration; see contrib/config.toml for what each field does."""

    partition: str
    nodes: dict[str, tuple[str, ...]]  # expanded node name -> geometry model names
    state_dir: Path
    run_dir: Path
    key_file: Path
    log_file: Path | None
    algorithm: str
    batch_window: float
    batch_size: int
    cycle: float
    token_ttl: float
    release_ahead: float
    start_timeout: float
    notify: str
    default_runtime: float
    serial_fraction: float
    backend: str
    simulated_dir: Path
    latency_scale: float
    reuse_wait: float
    lock_timeout: float = 60.0
    metrics: str = "127.0.0.1:9764"
    reports: str = ""  # the planner's node-report receiver, host:port; "" off
    web: bool = False
    standby: bool = False
    max_planned: int = 2000  # held jobs with a standing plan at most (0: no limit)
    reorder: int = 0  # lower-priority jobs that may go before a job (-1: no bound)
    site_policy: str = "on"  # "on": Slurm's priority, limits and reservations decide
    # makespan | jct | balanced (planner.sequencing); "": balanced where the policy takes one
    objective: str = ""
    # seconds a restartable job runs past its estimate before adaptive may move it to an
    # idle whole GPU (planner.upsize); 0: off
    upsize: float = 0.0
    lease_ttl: float = 30.0
    public_file: Path | None = None
    metrics_file: Path | None = None
    gres: str = "on"  # "on": the instance's GRES record and slice count; "records"; "off"
    write_concurrency: int = 8  # scontrol updates run at once (releases, notes)
    apply_budget: float = 3.0  # seconds of Slurm writes per cycle before a fresh read
    source: Path | None = None

    def gpu_models(self, node: str) -> tuple[str, ...]:
        """The GPU models of ``node`` in index order; ConfigError if it is not configured."""
        try:
            return self.nodes[node]
        except KeyError:
            near = _close(node, list(self.nodes), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(
                f"{_name(self.source)}: nodes: node {node!r} is not configured{hint}; "
                f'add it to [nodes], e.g. "{node}" = ["A100-40GB"]'
            ) from None

    def run_dir_for(self, node: str) -> Path:
        """``run_dir`` with ``%n`` replaced by the node name."""
        return Path(str(self.run_dir).replace(NODE_TOKEN, node))

    def metrics_file_for(self, node: str) -> Path:
        """Where the node's hooks write their metrics (node_exporter's textfile format):
        ``metrics_file`` with ``%n`` replaced, else ``node-metrics.prom`` in the run dir."""
        if self.metrics_file is None:
            return self.run_dir_for(node) / "node-metrics.prom"
        return Path(str(self.metrics_file).replace(NODE_TOKEN, node))

    def simulated_dir_for(self, node: str) -> Path:
        """``simulated_dir`` with ``%n`` replaced by the node name."""
        return Path(str(self.simulated_dir).replace(NODE_TOKEN, node))


# ---------------------------------------------------------------------------
# Schema: section -> key -> field


@dataclass(frozen=True)
class _Field:
    attr: str
    kind: str  # str | float | int | path | optpath | choice
    default: object
    example: str  # what a valid value looks like, for the fix in messages
    check: Callable[[object], str | None] | None = None
    choices: tuple[str, ...] = ()
    node_token: bool = False  # %n allowed (and expanded per node)


def _at_least(low: float, strict: bool) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        ok = value > low if strict else value >= low  # type: ignore[operator]
        return None if ok else f"must be {'>' if strict else '>='} {low:g}, got {value!r}"

    return check


def _fraction(value: object) -> str | None:
    return None if 0.0 <= value <= 1.0 else f"must be between 0 and 1, got {value!r}"  # type: ignore[operator]


def _reachable(value: object) -> str | None:
    """The nodes connect to this address: a wildcard would send them to themselves."""
    host = str(value).rpartition(":")[0]
    if host in ("0.0.0.0", "::"):
        return (
            f"is the address the nodes send their reports to, got {value!r}; give the "
            "controller's address as the nodes reach it (the planner listens there)"
        )
    return None


_POSITIVE = _at_least(0, strict=True)
MAX_WRITE_CONCURRENCY = 64


def _between(low: int, high: int) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        ok = low <= value <= high  # type: ignore[operator]
        return None if ok else f"must be between {low} and {high}, got {value!r}"

    return check


_NON_NEGATIVE = _at_least(0, strict=False)
# [planner] upsize: the policies that take it (planner.upsize; not imported: hooks read this)
UPSIZE_POLICIES = ("adaptive",)
# [planner] objective: planner.sequencing.OBJECTIVES (not imported: hooks read this file)
OBJECTIVES = ("makespan", "jct", "balanced")

SCHEMA: dict[str, dict[str, _Field]] = {
    "slurm": {
        "partition": _Field("partition", "str", "mig", '"mig"'),
        "gres": _Field("gres", "choice", "on", '"on"', choices=("on", "records", "off")),
        "write_concurrency": _Field(
            "write_concurrency", "int", 8, "8", _between(1, MAX_WRITE_CONCURRENCY)
        ),
    },
    "paths": {
        "state_dir": _Field("state_dir", "path", "/var/lib/slurm-mig", '"/var/lib/slurm-mig"'),
        "run_dir": _Field("run_dir", "path", "/run/slurm-mig", '"/run/slurm-mig"', node_token=True),
        "key_file": _Field("key_file", "path", str(DEFAULT_KEY_FILE), f'"{DEFAULT_KEY_FILE}"'),
        "log_file": _Field("log_file", "optpath", "", '"" (stderr) or "/var/log/slurm-mig.log"'),
        "public_file": _Field(
            "public_file", "optpath", "", '"" (off) or "/run/slurm-mig-public/plan.json"'
        ),
    },
    "planner": {
        "algorithm": _Field("algorithm", "policy", "adaptive", '"adaptive"'),
        "batch_window": _Field("batch_window", "float", 30.0, "30.0", _NON_NEGATIVE),
        "batch_size": _Field("batch_size", "int", 0, "0 (all waiting jobs)", _NON_NEGATIVE),
        "max_planned": _Field("max_planned", "int", 2000, "2000 (0: no limit)", _NON_NEGATIVE),
        "reorder": _Field(
            "reorder", "int", 0, "0 (strict priority order; -1: no bound)", _between(-1, 100_000)
        ),  # fmt: skip
        "site_policy": _Field("site_policy", "choice", "on", '"on"', choices=("on", "off")),
        "objective": _Field("objective", "choice", "", '"balanced"', choices=OBJECTIVES),
        "upsize": _Field("upsize", "float", 0.0, "0 (off) or 600.0", _between(0, 86_400)),
        "cycle": _Field("cycle", "float", 5.0, "5.0", _POSITIVE),
        "token_ttl": _Field("token_ttl", "float", 3600.0, "3600.0", _POSITIVE),
        "release_ahead": _Field("release_ahead", "float", 600.0, "600.0", _NON_NEGATIVE),
        "start_timeout": _Field("start_timeout", "float", 120.0, "120.0", _NON_NEGATIVE),
        "notify": _Field("notify", "address", "", '"" (off) or "10.0.0.1:6820"'),
        "default_runtime": _Field("default_runtime", "float", 3600.0, "3600.0", _POSITIVE),
        "serial_fraction": _Field("serial_fraction", "float", 0.3, "0.3", _fraction),
        "metrics": _Field("metrics", "address", "127.0.0.1:9764", '"127.0.0.1:9764" or "" (off)'),
        "reports": _Field(
            "reports", "address", "", '"" (off) or "10.0.0.1:9765"', check=_reachable
        ),
        "web": _Field("web", "bool", False, "false"),
        "apply_budget": _Field("apply_budget", "float", 3.0, "3.0", _POSITIVE),
        "standby": _Field("standby", "bool", False, "false"),
        "lease_ttl": _Field("lease_ttl", "float", 30.0, "30.0", _at_least(3, strict=False)),
    },
    "device": {
        "backend": _Field("backend", "choice", "nvml", '"nvml"', choices=BACKENDS),
        "simulated_dir": _Field(
            "simulated_dir",
            "path",
            "/var/lib/slurm-mig/simulated/%n",
            '"/var/lib/slurm-mig/simulated/%n"',
            node_token=True,
        ),
        "latency_scale": _Field("latency_scale", "float", 1.0, "1.0", _NON_NEGATIVE),
    },
    "hooks": {
        "reuse_wait": _Field("reuse_wait", "float", 300.0, "300.0", _NON_NEGATIVE),
        "lock_timeout": _Field("lock_timeout", "float", 60.0, "60.0", _POSITIVE),
        "metrics_file": _Field(
            "metrics_file",
            "optpath",
            "",
            '"" (node-metrics.prom in run_dir) or "/var/lib/node_exporter/slurm-mig-%n.prom"',
            node_token=True,
        ),
    },
}
SECTIONS = ("slurm", "nodes", "paths", "planner", "device", "hooks")
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


# ---------------------------------------------------------------------------
# Public API


def config_path(path: str | Path | None = None) -> Path:
    """The file to read: ``path``, else ``$SLURM_MIG_CONFIG``, else the default."""
    return _resolve(path)[0]


def _resolve(path: str | Path | None) -> tuple[Path, str]:
    if path is not None and str(path) != "":
        return Path(path), "the path given"
    env = os.environ.get(CONFIG_ENV)
    if env:
        return Path(env), f"the path in ${CONFIG_ENV}"
    return DEFAULT_CONFIG_PATH, f"the default path; choose another with --config or ${CONFIG_ENV}"


def load_config(path: str | Path | None = None) -> Config:
    """Read and validate the config file; ConfigError listing every problem."""
    config, problems = _load(*_resolve(path))
    if problems:
        raise ConfigError(problems)
    assert config is not None
    return config


def check_config(path: str | Path | None = None) -> list[str]:
    """Every problem of the config file, one line each; [] when it is usable."""
    return _load(*_resolve(path))[1]


def config_from_dict(data: Mapping, source: Path | None = None) -> Config:
    """Validate an already parsed TOML document (tests, tools); ConfigError if unusable."""
    config, problems = _validate(data, source)
    if problems:
        raise ConfigError(problems)
    assert config is not None
    return config


def expand_hostlist(expr: str) -> list[str]:
    """Slurm hostlist to names, in order (`hostlist.expand_hostlist`); ConfigError on an
    empty name, bad bracket or bad range."""
    try:
        return hostlist.expand_hostlist(expr)
    except hostlist.HostlistError as exc:
        raise ConfigError(str(exc)) from None


# ---------------------------------------------------------------------------
# Loading and validation


def _name(source: Path | None) -> str:
    return str(source) if source is not None else "<config>"


def _load(path: Path, origin: str) -> tuple[Config | None, list[str]]:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return None, [
            f"{path}: no config file there ({origin}); start from the "
            f"annotated example: 'slurm-mig site-files DIR' writes it as {EXAMPLE_CONFIG} "
            f"(contrib/config.toml in the sources); copy it to {path} and list your nodes"
        ]
    except IsADirectoryError:
        return None, [f"{path}: is a directory; give the path of the config.toml file"]
    except PermissionError:
        return None, [f"{path}: cannot read the config file (permission denied); make it 0644"]
    except OSError as exc:
        return None, [f"{path}: cannot read the config file ({exc.strerror or exc})"]
    if len(raw) > MAX_CONFIG_BYTES:
        return None, [f"{path}: larger than 1 MiB, not a slurm-mig config; check the path"]
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, [f"{path}: not UTF-8 text; save the config file as UTF-8"]
    except tomllib.TOMLDecodeError as exc:
        return None, [f"{path}: not valid TOML ({exc}); fix the syntax at that place"]
    except RecursionError:
        return None, [f"{path}: tables or arrays nested too deeply; a slurm-mig config is flat"]
    return _validate(data, path)


def _validate(data: Mapping, source: Path | None) -> tuple[Config | None, list[str]]:
    where = _name(source)
    problems: list[str] = []

    def bad(field: str, text: str) -> None:
        problems.append(f"{where}: {field}: {text}")

    values = {f.attr: _convert(f, f.default) for fs in SCHEMA.values() for f in fs.values()}

    for section, body in data.items():
        if section not in SECTIONS:
            home = [name for name, fields in SCHEMA.items() if section in fields]
            if home and not isinstance(body, Mapping):
                bad(section, f"key outside any section; move it under [{home[0]}]")
            else:
                bad(
                    section,
                    f"unknown section [{section}]; {_suggest(section, SECTIONS, 'sections')}",
                )
            continue
        if not isinstance(body, Mapping):
            bad(section, f"must be a table, write it as [{section}] followed by key = value lines")
            continue
        if section == "nodes":
            continue
        for key, value in body.items():
            field = SCHEMA[section].get(key)
            if field is None:
                bad(f"{section}.{key}", _unknown_key(section, key))
                continue
            text = _check_value(field, value)
            if text is not None:
                bad(f"{section}.{key}", text)
                continue
            values[field.attr] = _convert(field, value)

    nodes = _validate_nodes(data.get("nodes"), bad)
    if values["release_ahead"] >= values["token_ttl"] and not problems:
        bad(
            "planner.release_ahead",
            f"{values['release_ahead']:g} s is not below token_ttl ({values['token_ttl']:g} s): "
            "a job released ahead would find its token expired; lower it, or 0 to turn it off",
        )
    if 0 < values["start_timeout"] < 2 * values["cycle"] and not problems:
        bad(
            "planner.start_timeout",
            f"{values['start_timeout']:g} s is less than two cycles "
            f"({2 * values['cycle']:g} s): released jobs would be held again before Slurm "
            "could start them; raise it, or 0 to turn it off",
        )
    if values["upsize"] and values["algorithm"] not in UPSIZE_POLICIES and not problems:
        bad(
            "planner.upsize",
            f"policy {values['algorithm']!r} does not move jobs; upsize is for "
            f"{', '.join(UPSIZE_POLICIES)}: set algorithm to it, or upsize to 0",
        )
    if values["objective"] and not problems:
        refused = _check_objective(values["algorithm"], values["objective"])
        if refused is not None:
            bad("planner.objective", refused)
    if problems:
        return None, problems
    return Config(nodes=nodes, source=source, **values), []  # type: ignore[arg-type]


def _check_address(value: str, fix: str) -> str | None:
    """Why ``value`` is not ``host:port`` (an IPv4 address or a host name), or None."""
    host, sep, port = value.rpartition(":")
    ok_host = bool(host) and all(c.isalnum() or c in ".-" for c in host)
    if not sep or not ok_host or not port.isdigit() or not 0 < int(port) < 65536:
        return f"must be host:port (a port from 1 to 65535), got {value!r}; {fix}"
    return None


def parse_address(value: str) -> tuple[str, int] | None:
    """``host:port`` of a validated address setting, or None when it is off ("")."""
    if not value:
        return None
    host, _, port = value.rpartition(":")
    return host, int(port)


def _check_policy(value: str) -> str | None:
    """Why ``value`` is not a registered policy name (listing them), or None."""
    from .planner.registry import UnknownPolicy, policy_info, policy_names

    try:
        policy_info(value)
    except UnknownPolicy:
        names = [n for n in policy_names() if n != "fixpart-SIZES"] + ["fixpart-<sizes>"]
        near = _close(value, names, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        return (
            f"unknown policy {value!r}{hint}; choose one of {', '.join(names)} "
            "('slurm-mig plan --help' says what each does)"
        )
    return None


def _check_objective(algorithm: str, objective: str) -> str | None:
    """Why policy ``algorithm`` cannot take ``[planner] objective``, or None (what the
    policy declares in the registry)."""
    from .planner.registry import UnknownPolicy, policy_info

    try:
        policy_info(algorithm).objective_options(objective)
    except UnknownPolicy as exc:
        return str(exc)
    return None


def _check_value(field: _Field, value: object) -> str | None:
    """Why ``value`` does not fit ``field``, with the fix; None when it fits."""
    fix = f"write e.g. {field.example}"
    if field.kind in ("str", "choice", "policy", "address", "path", "optpath"):
        if not isinstance(value, str):
            return f"must be a string in quotes, got {_toml(value)}; {fix}"
        if field.kind == "str":
            if not value.strip() or any(c.isspace() or c == "," for c in value):
                return f"must be one Slurm name without spaces or commas, got {value!r}; {fix}"
        elif field.kind == "policy":
            return _check_policy(value)
        elif field.kind == "address":
            if value == "":
                return None
            problem = _check_address(value, fix)
            if problem is None and field.check is not None:
                text = field.check(value)
                problem = None if text is None else f"{text}; {fix}"
            return problem
        elif field.kind == "choice":
            if value not in field.choices:
                near = _close(value, field.choices, n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                return (
                    f"unknown value {value!r}{hint}; choose one of "
                    f"{', '.join(repr(c) for c in field.choices)}"
                )
        else:
            if value == "" and field.kind == "optpath":
                return None
            if not value.startswith("/"):
                return f"must be an absolute path (starting with /), got {value!r}; {fix}"
            if NODE_TOKEN in value and not field.node_token:
                return (
                    f"{NODE_TOKEN} is expanded only in paths.run_dir, device.simulated_dir and "
                    "hooks.metrics_file, "
                    f"got {value!r}; use a fixed path, {fix}"
                )
        return None
    if field.kind == "bool":
        if not isinstance(value, bool):
            return f"must be true or false without quotes, got {_toml(value)}; {fix}"
        return None
    if field.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be a whole number without quotes, got {_toml(value)}; {fix}"
    elif field.kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be a number without quotes, got {_toml(value)}; {fix}"
        if not math.isfinite(value):
            return f"must be a finite number, got {value!r}; {fix}"
    if field.check is not None:
        text = field.check(value)
        if text is not None:
            return f"{text}; {fix}"
    return None


def _convert(field: _Field, value: object) -> object:
    if field.kind == "float":
        return float(value)  # type: ignore[arg-type]
    if field.kind == "path":
        return Path(value)  # type: ignore[arg-type]
    if field.kind == "optpath":
        return Path(value) if value else None  # type: ignore[arg-type]
    return value


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}" (a string)'
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _suggest(name: str, options: tuple[str, ...] | list[str], what: str) -> str:
    near = _close(name, list(options), n=1)
    if near:
        return f"did you mean {near[0]!r}? ({what}: {', '.join(options)})"
    return f"remove it ({what}: {', '.join(options)})"


def _unknown_key(section: str, key: str) -> str:
    for other, fields in SCHEMA.items():
        if other != section and key in fields:
            return f"unknown key {key!r} in [{section}]; it belongs in [{other}], move it there"
    valid = list(SCHEMA[section])
    return f"unknown key {key!r}; {_suggest(key, valid, f'keys of [{section}]')}"


def _validate_nodes(body: object, bad: Callable[[str, str], None]) -> dict[str, tuple[str, ...]]:
    example = 'write e.g. "gpu[01-04]" = ["A100-40GB", "A100-40GB"]'
    if body is None:
        bad("nodes", f"missing [nodes] section; list each GPU node and its GPU models, {example}")
        return {}
    if not isinstance(body, Mapping):
        return {}  # reported by the caller
    if not body:
        bad("nodes", f"no nodes listed; list at least one node, {example}")
        return {}
    nodes: dict[str, tuple[str, ...]] = {}
    origin: dict[str, str] = {}
    for expr, models in body.items():
        field = f'nodes."{expr}"'
        try:
            names = expand_hostlist(expr)
        except ConfigError as exc:
            bad(field, str(exc))
            names = []
        for n in names:
            if not _NODE_NAME.match(n):
                bad(field, f"{n!r} is not a node name (letters, digits, '.', '_', '-'); {example}")
        models_ok = _node_models(models, field, bad, example)
        for n in names:
            if n in origin:
                prev = origin[n]
                also = "" if prev == expr else f' (also in "{prev}")'
                bad(field, f"node {n!r} is listed twice{also}; list each node once")
                continue
            origin[n] = expr
            if models_ok is not None:
                nodes[n] = models_ok
    return nodes


def _node_models(
    models: object, field: str, bad: Callable[[str, str], None], example: str
) -> tuple[str, ...] | None:
    if not isinstance(models, list) or not models:
        bad(
            field,
            f"must be a non-empty list of GPU models in index order, got {_toml(models)}; {example}",
        )
        return None
    out: list[str] = []
    ok = True
    for i, m in enumerate(models):
        if not isinstance(m, str):
            bad(field, f"GPU {i}: model must be a string, got {_toml(m)}; {example}")
            ok = False
            continue
        try:
            out.append(get_model(m).name)
        except GeometryError:
            names = {k.upper(): k for k in (*MODELS, *ALIASES)}
            near = _close(m.strip().upper(), list(names), n=1)
            hint = f" (did you mean {names[near[0]]!r}?)" if near else ""
            bad(
                field,
                f"GPU {i}: unknown GPU model {m!r}{hint}; known models: {', '.join(MODELS)} "
                f"(short names: {', '.join(sorted(k for k in ALIASES if '-' not in k))})",
            )
            ok = False
    return tuple(out) if ok else None
