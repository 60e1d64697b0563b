"""The config file (slurm_mig.config) and the CLI commands around it: check-config and
keygen. Real TOML files in tmp_path, the real command in-process and as a process."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from slurm_mig import config as config_mod
from slurm_mig.cli import main
from slurm_mig.config import (
    DEFAULT_CONFIG_PATH,
    SCHEMA,
    Config,
    ConfigError,
    check_config,
    config_from_dict,
    config_path,
    expand_hostlist,
    load_config,
)
from slurm_mig.slurm.assignment import load_key

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "contrib" / "config.toml"
NODES = '[nodes]\n"gpu[01-02]" = ["A100-40GB", "A100-40GB"]\n'


def write(tmp_path: Path, text: str, name: str = "config.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture(autouse=True)
def _no_env_config(monkeypatch):
    monkeypatch.delenv("SLURM_MIG_CONFIG", raising=False)


# ---------------------------------------------------------------------------
# Loading: defaults, round trip, the example


def test_only_nodes_is_required_and_everything_else_takes_the_documented_defaults(tmp_path):
    path = write(tmp_path, NODES)
    c = load_config(path)
    assert c == Config(
        partition="mig",
        nodes={"gpu01": ("A100-40GB", "A100-40GB"), "gpu02": ("A100-40GB", "A100-40GB")},
        state_dir=Path("/var/lib/slurm-mig"),
        run_dir=Path("/run/slurm-mig"),
        key_file=Path("/etc/slurm-mig/key"),
        log_file=None,
        algorithm="adaptive",
        batch_window=30.0,
        batch_size=0,
        release_ahead=600.0,
        start_timeout=120.0,
        notify="",
        cycle=5.0,
        token_ttl=3600.0,
        default_runtime=3600.0,
        serial_fraction=0.3,
        backend="nvml",
        simulated_dir=Path("/var/lib/slurm-mig/simulated/%n"),
        latency_scale=1.0,
        reuse_wait=300.0,
        source=path,
    )
    assert check_config(path) == []


def test_every_field_set_comes_back_with_its_type(tmp_path):
    path = write(
        tmp_path,
        """
        [slurm]
        partition = "gpu-mig"
        [nodes]
        "n[1-2]" = ["a100", "A100-80GB"]
        "h1" = ["H100"]
        [paths]
        state_dir = "/srv/state"
        run_dir = "/srv/run/%n"
        key_file = "/srv/key"
        log_file = "/var/log/slurm-mig.log"
        [planner]
        algorithm = "auto"
        batch_window = 0
        batch_size = 8
        cycle = 1
        token_ttl = 600.5
        default_runtime = 120
        serial_fraction = 0
        [device]
        backend = "simulated"
        simulated_dir = "/tmp/sim/%n"
        latency_scale = 0
        [hooks]
        reuse_wait = 0.0
        """,
    )
    c = load_config(path)
    assert c.partition == "gpu-mig"
    # aliases and case are canonicalised to geometry's model names
    assert c.nodes == {
        "n1": ("A100-40GB", "A100-80GB"),
        "n2": ("A100-40GB", "A100-80GB"),
        "h1": ("H100-80GB",),
    }
    assert (c.state_dir, c.run_dir, c.key_file, c.log_file) == (
        Path("/srv/state"),
        Path("/srv/run/%n"),
        Path("/srv/key"),
        Path("/var/log/slurm-mig.log"),
    )
    assert (c.algorithm, c.batch_size, c.backend) == ("auto", 8, "simulated")
    for name, want in [
        ("batch_window", 0.0),
        ("cycle", 1.0),
        ("token_ttl", 600.5),
        ("default_runtime", 120.0),
        ("serial_fraction", 0.0),
        ("latency_scale", 0.0),
        ("reuse_wait", 0.0),
    ]:
        value = getattr(c, name)
        assert type(value) is float and value == want, name
    assert type(c.batch_size) is int
    assert c.source == path


def test_the_annotated_example_is_valid_and_documents_the_defaults(tmp_path):
    example = load_config(EXAMPLE)
    defaults = load_config(write(tmp_path, NODES))
    skip = {"nodes", "source"}
    for field in Config.__dataclass_fields__:
        if field not in skip:
            assert getattr(example, field) == getattr(defaults, field), field
    text = EXAMPLE.read_text()
    for section, fields in SCHEMA.items():  # every key is shown and explained
        assert f"[{section}]" in text
        for key, field in fields.items():  # one unset by default is shown commented out
            shown = f"\n{key} = " in text or (field.default == "" and f"\n#{key} = " in text)
            assert shown, key
    assert len(example.nodes) >= 1


def test_config_from_dict_validates_like_the_file():
    c = config_from_dict({"nodes": {"x": ["A30"]}})
    assert c.nodes == {"x": ("A30-24GB",)} and c.source is None
    with pytest.raises(ConfigError, match=r"<config>: planner.cycle: must be > 0"):
        config_from_dict({"nodes": {"x": ["A30"]}, "planner": {"cycle": 0}})


# ---------------------------------------------------------------------------
# Where the file comes from


def test_path_argument_then_environment_then_default(monkeypatch, tmp_path):
    assert config_path(None) == DEFAULT_CONFIG_PATH
    monkeypatch.setenv("SLURM_MIG_CONFIG", str(tmp_path / "env.toml"))
    assert config_path(None) == tmp_path / "env.toml"
    assert config_path(tmp_path / "arg.toml") == tmp_path / "arg.toml"
    write(tmp_path, NODES, "env.toml")
    assert load_config().source == tmp_path / "env.toml"


def test_missing_file_says_where_it_looked_and_how_to_start(tmp_path, monkeypatch):
    missing = tmp_path / "nope" / "config.toml"
    with pytest.raises(ConfigError) as err:
        load_config(missing)
    msg = str(err.value)
    assert str(missing) in msg and "contrib/config.toml" in msg
    monkeypatch.setenv("SLURM_MIG_CONFIG", str(missing))
    (problem,) = check_config()
    assert "SLURM_MIG_CONFIG" in problem and str(missing) in problem


def test_missing_default_file_names_the_default_and_how_to_choose_another():
    if DEFAULT_CONFIG_PATH.exists():
        pytest.skip("this machine has a real config at the default path")
    (problem,) = check_config()
    assert str(DEFAULT_CONFIG_PATH) in problem
    assert "--config" in problem and "contrib/config.toml" in problem


def test_unreadable_or_malformed_files(tmp_path):
    (problem,) = check_config(tmp_path)
    assert "is a directory" in problem
    bad = write(tmp_path, '[nodes\n"x" = ["A30"]\n')
    (problem,) = check_config(bad)
    assert problem.startswith(f"{bad}: not valid TOML") and "line 1" in problem
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe[nodes]")
    (problem,) = check_config(binary)
    assert "UTF-8" in problem


# ---------------------------------------------------------------------------
# Every error path: file, section.key and the fix in the message

ERROR_CASES = [
    # (toml after [nodes], field, fragments of the message)
    ("[slurm]\npartiton = 'mig'", "slurm.partiton", ["unknown key", "did you mean 'partition'"]),
    ("[planner]\nbatch_sise = 3", "planner.batch_sise", ["did you mean 'batch_size'"]),
    ("[planner]\nzzz = 3", "planner.zzz", ["unknown key 'zzz'", "remove it", "batch_window"]),
    ("[paths]\nbatch_size = 3", "paths.batch_size", ["belongs in [planner]", "move it"]),
    ("[planer]\nbatch_size = 3", "planer", ["unknown section", "did you mean 'planner'"]),
    ("[qqq]\nx = 1", "qqq", ["unknown section [qqq]", "remove it", "slurm, nodes, paths"]),
    ("[slurm]\npartition = 7", "slurm.partition", ["must be a string", "got 7", '"mig"']),
    ("[slurm]\npartition = 'a b'", "slurm.partition", ["without spaces", "'a b'"]),
    ("[slurm]\npartition = ''", "slurm.partition", ["one Slurm name"]),
    ("[planner]\nbatch_size = -1", "planner.batch_size", ["must be >= 0, got -1", "e.g. 0"]),
    ("[planner]\nbatch_size = 2.5", "planner.batch_size", ["whole number", "2.5"]),
    ("[planner]\nbatch_size = true", "planner.batch_size", ["whole number", "got true"]),
    ("[planner]\ncycle = '5'", "planner.cycle", ["number without quotes", '"5" (a string)']),
    ("[planner]\ncycle = 0", "planner.cycle", ["must be > 0, got 0", "e.g. 5.0"]),
    ("[planner]\ntoken_ttl = -1.0", "planner.token_ttl", ["must be > 0"]),
    ("[planner]\ntoken_ttl = inf", "planner.token_ttl", ["finite", "inf"]),
    ("[planner]\ndefault_runtime = nan", "planner.default_runtime", ["finite", "nan"]),
    ("[planner]\ndefault_runtime = 0", "planner.default_runtime", ["must be > 0"]),
    ("[planner]\nbatch_window = -1", "planner.batch_window", ["must be >= 0"]),
    ("[planner]\nserial_fraction = 1.5", "planner.serial_fraction", ["between 0 and 1", "1.5"]),
    ("[planner]\nserial_fraction = -0.1", "planner.serial_fraction", ["between 0 and 1"]),
    ("[planner]\nalgorithm = 'fra'", "planner.algorithm", ["did you mean 'far'", "auto"]),
    (
        "[planner]\nalgorithm = 'miso'",
        "planner.algorithm",
        ["unknown policy 'miso'", "far, far-pcie", "frag-aware", "fixpart-<sizes>"],
    ),
    ("[planner]\nstart_timeout = 8", "planner.start_timeout", ["less than two cycles", "or 0"]),
    ("[planner]\nstart_timeout = -1", "planner.start_timeout", ["must be >= 0"]),
    ("[device]\nbackend = 'nvlm'", "device.backend", ["did you mean 'nvml'", "'simulated'"]),
    ("[device]\nlatency_scale = -1", "device.latency_scale", ["must be >= 0, got -1"]),
    ("[hooks]\nreuse_wait = -5", "hooks.reuse_wait", ["must be >= 0"]),
    ("[paths]\nstate_dir = 'var/lib'", "paths.state_dir", ["absolute path", "'var/lib'"]),
    ("[paths]\nrun_dir = '~/run'", "paths.run_dir", ["absolute path"]),
    ("[paths]\nkey_file = 'key'", "paths.key_file", ["absolute path", '"/etc/slurm-mig/key"']),
    ("[paths]\nlog_file = 'x.log'", "paths.log_file", ["absolute path", '"" (stderr)']),
    ("[paths]\nstate_dir = ''", "paths.state_dir", ["absolute path"]),
    ("[paths]\nkey_file = '/etc/%n/key'", "paths.key_file", ["%n is expanded only in"]),
    ("[device]\nsimulated_dir = 'sim/%n'", "device.simulated_dir", ["absolute path"]),
]


@pytest.mark.parametrize("extra, field, fragments", ERROR_CASES)
def test_each_bad_value_is_named_with_its_fix(tmp_path, extra, field, fragments):
    path = write(tmp_path, NODES + extra + "\n")
    problems = check_config(path)
    assert len(problems) == 1, problems
    (problem,) = problems
    assert problem.startswith(f"{path}: {field}: "), problem
    for fragment in fragments:
        assert fragment in problem, (fragment, problem)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.problems == problems


@pytest.mark.parametrize(
    "top, field, fragments",
    [
        ("partition = 'mig'", "partition", ["outside any section", "under [slurm]"]),
        ("slurm = 3", "slurm", ["must be a table", "[slurm]"]),
        ("nodes = 3", "nodes", ["must be a table", "[nodes]"]),
    ],
)
def test_keys_outside_a_section_are_named(tmp_path, top, field, fragments):
    text = top + "\n" + (NODES if not top.startswith("nodes") else "")
    path = write(tmp_path, text)
    (problem,) = check_config(path)
    assert problem.startswith(f"{path}: {field}: "), problem
    for fragment in fragments:
        assert fragment in problem, (fragment, problem)


NODE_CASES = [
    ("", "nodes", ["missing [nodes]", '"gpu[01-04]" = ["A100-40GB"']),
    ("[nodes]\n", "nodes", ["no nodes listed", "at least one node"]),
    ('[nodes]\n"g1" = "A100"', 'nodes."g1"', ["non-empty list", "in index order"]),
    ('[nodes]\n"g1" = []', 'nodes."g1"', ["non-empty list"]),
    ('[nodes]\n"g1" = [40]', 'nodes."g1"', ["GPU 0: model must be a string"]),
    (
        '[nodes]\n"g1" = ["A100", "A10"]',
        'nodes."g1"',
        ["GPU 1: unknown GPU model 'A10'", "did you mean 'A100'", "A30-24GB", "B200-180GB"],
    ),
    ('[nodes]\n"g1" = ["Z9"]', 'nodes."g1"', ["unknown GPU model 'Z9'", "known models:"]),
    ('[nodes]\n"g[3-1]" = ["A30"]', 'nodes."g[3-1]"', ["runs backwards", "lower bound first"]),
    ('[nodes]\n"g[1-x]" = ["A30"]', 'nodes."g[1-x]"', ["bad range '1-x'", "[01-04,07]"]),
    ('[nodes]\n"g[1-2" = ["A30"]', 'nodes."g[1-2"', ["'[' without ']'"]),
    ('[nodes]\n"g a" = ["A30"]', 'nodes."g a"', ["'g a' is not a node name"]),
    ('[nodes]\n"g[1,1]" = ["A30"]', 'nodes."g[1,1]"', ["node 'g1' is listed twice", "once"]),
    (
        '[nodes]\n"g[1-3]" = ["A30"]\n"g2" = ["A30"]',
        'nodes."g2"',
        ["node 'g2' is listed twice (also in \"g[1-3]\")"],
    ),
]


@pytest.mark.parametrize("text, field, fragments", NODE_CASES)
def test_each_bad_node_entry_is_named_with_its_fix(tmp_path, text, field, fragments):
    path = write(tmp_path, text + "\n")
    (problem,) = check_config(path)
    assert problem.startswith(f"{path}: {field}: "), problem
    for fragment in fragments:
        assert fragment in problem, (fragment, problem)


def test_check_config_reports_every_problem_not_just_the_first(tmp_path):
    path = write(
        tmp_path,
        """
        [slurm]
        partiton = "mig"
        [nodes]
        "gpu[01-02]" = ["A100", "A10"]
        "gpu02" = ["A100"]
        [planner]
        batch_size = -1
        cycle = "5"
        [device]
        backend = "nvlm"
        [hoks]
        reuse_wait = 1.0
        """,
    )
    problems = check_config(path)
    fields = [p.removeprefix(f"{path}: ").split(":")[0] for p in problems]
    assert sorted(fields) == sorted(
        [
            "slurm.partiton",
            'nodes."gpu[01-02]"',
            'nodes."gpu02"',
            "planner.batch_size",
            "planner.cycle",
            "device.backend",
            "hoks",
        ]
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.problems == problems
    assert str(err.value) == "\n".join(problems)


# ---------------------------------------------------------------------------
# Hostlists and %n

HOSTLISTS = [
    ("gpu01", ["gpu01"]),
    ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
    ("gpu[01-03,07],login", ["gpu01", "gpu02", "gpu03", "gpu07", "login"]),
    ("a[1-2]b", ["a1b", "a2b"]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("n[08-10]", ["n08", "n09", "n10"]),
    ("n[007]", ["n007"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    (" a , b ", ["a", "b"]),
    ("[1-2]x", ["1x", "2x"]),
    ("gpu[5-5]", ["gpu5"]),
]


@pytest.mark.parametrize("expr, names", HOSTLISTS)
def test_hostlist_expansion(expr, names):
    assert expand_hostlist(expr) == names


@pytest.mark.parametrize(
    "expr, fragment",
    [
        ("gpu[3-1]", "runs backwards"),
        ("gpu[a-b]", "bad range 'a-b'"),
        ("gpu[1-2-3]", "bad range '1-2-3'"),
        ("gpu[-3]", "bad range '-3'"),
        ("gpu[1-]", "bad range '1-'"),
        ("gpu[1,,2]", "bad range ''"),
        ("gpu[]", "empty brackets"),
        ("x[ 1 - 2 ]", "bad range '1 - 2'"),
        ("x[1-\u0663]", "bad range"),
        ("gpu[01-", "'[' without ']'"),
        ("gpu]", "']' without '['"),
        ("a,,b", "empty name"),
        ("", "empty name"),
        ("a,", "empty name"),
        ("n[0-99999999]", "too large"),
        ("a[0-999]b[0-999]", "expands to 1000000 names"),
    ],
)
def test_bad_hostlists_raise_config_error(expr, fragment):
    with pytest.raises(ConfigError) as err:
        expand_hostlist(expr)
    assert fragment in str(err.value)
    assert repr(expr) in str(err.value)


def test_hostlist_inside_config_expands_to_one_entry_per_node(tmp_path):
    c = load_config(write(tmp_path, '[nodes]\n"gpu[01-03,07],login" = ["A30"]\n'))
    assert list(c.nodes) == ["gpu01", "gpu02", "gpu03", "gpu07", "login"]


def test_node_token_is_expanded_in_run_dir_and_simulated_dir(tmp_path):
    path = write(
        tmp_path,
        NODES + "[paths]\nrun_dir = '/run/slurm-mig/%n'\n"
        "[device]\nsimulated_dir = '/sim/%n/gpus-%n'\n",
    )
    c = load_config(path)
    assert c.run_dir_for("gpu01") == Path("/run/slurm-mig/gpu01")
    assert c.simulated_dir_for("gpu02") == Path("/sim/gpu02/gpus-gpu02")
    plain = load_config(write(tmp_path, NODES, "plain.toml"))
    assert plain.run_dir_for("gpu01") == Path("/run/slurm-mig")


def test_gpu_models_of_a_node_and_an_unknown_node(tmp_path):
    path = write(tmp_path, '[nodes]\n"gpu[01-02]" = ["A30", "H100"]\n')
    c = load_config(path)
    assert c.gpu_models("gpu02") == ("A30-24GB", "H100-80GB")
    with pytest.raises(ConfigError) as err:
        c.gpu_models("gpu03")
    msg = str(err.value)
    assert str(path) in msg and "'gpu03' is not configured" in msg
    assert "did you mean 'gpu0" in msg and "[nodes]" in msg


def test_config_and_profiles_import_nothing_heavy():
    code = (
        "import sys, slurm_mig.config, slurm_mig.runtimes; "
        "heavy = {'numpy', 'torch', 'statsmodels', 'matplotlib', 'pandas', 'scipy'}; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------
# slurm-mig check-config


def test_check_config_command_prints_ok_and_a_summary(tmp_path, capsys):
    path = write(
        tmp_path,
        """
        [slurm]
        partition = "p1"
        [nodes]
        "gpu[01-03]" = ["A100-40GB", "A100-40GB"]
        "h1" = ["H100", "A30"]
        [device]
        backend = "simulated"
        """,
    )
    rc = main(["check-config", str(path)])
    out, err = capsys.readouterr()
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"{path}: ok"
    assert "partition  p1" in lines
    assert "nodes      4" in lines
    assert "gpus       8 (1 x A30-24GB, 6 x A100-40GB, 1 x H100-80GB)" in lines
    assert "backend    simulated" in lines
    assert any(
        ln.startswith("gres       each job's instance record and its slices") for ln in lines
    )
    assert "reports    off (the planner reads the node files it can see)" in lines


def test_check_config_names_the_gres_choices_and_refuses_another(tmp_path, capsys):
    path = write(tmp_path, NODES + '[slurm]\ngres = "records"\n')
    assert main(["check-config", str(path)]) == 0
    assert "gres       each job's instance record; no slice count" in capsys.readouterr().out
    path = write(tmp_path, NODES + '[slurm]\ngres = "slices"\n')
    assert main(["check-config", str(path)]) == 1
    out = capsys.readouterr().out
    assert "slurm.gres: unknown value 'slices'; choose one of 'on', 'records', 'off'" in out


def test_check_config_command_lists_each_problem_and_exits_1(tmp_path, capsys):
    path = write(tmp_path, NODES + "[planner]\nbatch_size = -1\ncycle = -1\n")
    rc = main(["check-config", str(path)])
    out, err = capsys.readouterr()
    assert rc == 1
    assert out.splitlines() == check_config(path)
    assert len(out.splitlines()) == 2
    assert err.strip() == f"{path}: 2 problems"


def test_check_config_command_reads_the_environment_default(tmp_path, capsys, monkeypatch):
    path = write(tmp_path, NODES)
    monkeypatch.setenv("SLURM_MIG_CONFIG", str(path))
    assert main(["check-config"]) == 0
    assert capsys.readouterr().out.startswith(f"{path}: ok\n")


def test_check_config_command_on_a_missing_file_is_one_line_without_traceback(tmp_path):
    missing = tmp_path / "absent.toml"
    bad = write(tmp_path, "[nodes\n")
    for target, rc in ((missing, 1), (bad, 1), (EXAMPLE, 0)):
        proc = subprocess.run(
            [sys.executable, "-m", "slurm_mig", "check-config", str(target)],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            timeout=60,
        )
        assert proc.returncode == rc, proc.stderr
        assert "Traceback" not in proc.stderr + proc.stdout
    assert (
        "contrib/config.toml"
        in subprocess.run(
            [sys.executable, "-m", "slurm_mig", "check-config", str(missing)],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            timeout=60,
        ).stdout
    )


def test_check_config_on_toml_nested_thousands_deep_is_one_problem(tmp_path):
    # tomllib's RecursionError was a traceback
    deep = write(tmp_path, "a = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n")
    big = write(tmp_path, "# " + "x" * (2 << 20) + "\n", name="big.toml")
    for path, problem in (
        (deep, f"{deep}: tables or arrays nested too deeply; a slurm-mig config is flat"),
        (big, f"{big}: larger than 1 MiB, not a slurm-mig config; check the path"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "slurm_mig", "check-config", str(path)],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            timeout=60,
        )
        assert (proc.returncode, proc.stdout) == (1, problem + "\n"), proc.stderr
        assert proc.stderr == f"{path}: 1 problem\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="the hooks' key must be root's: run as root")
def test_check_config_refuses_a_key_others_can_read_or_own(tmp_path, capsys):
    # A 0644 key was used and check-config said ok: anyone who can read it forges
    # any assignment.
    key = tmp_path / "key"
    path = write(tmp_path, NODES + f"[paths]\nkey_file = '{key}'\n")
    assert main(["check-config", str(path)]) == 0
    assert f"key        {key} (missing: create it with 'slurm-mig keygen {key}')" in (
        capsys.readouterr().out.splitlines()
    )
    assert main(["keygen", str(key)]) == 0
    capsys.readouterr()
    assert main(["check-config", str(path)]) == 0
    assert f"key        {key} (owner root, mode 0600)" in capsys.readouterr().out.splitlines()
    for mode, owner, problem in (
        (0o644, 0, f"readable or writable by others (mode 0644); run 'chmod 600 {key}'"),
        (0o604, 0, "(mode 0604)"),
        (0o600, 4242, f"owned by uid 4242, not root; run 'chown root:root {key}'"),
    ):
        key.chmod(mode)
        os.chown(key, owner, owner)
        assert main(["check-config", str(path)]) == 1
        out, err = capsys.readouterr()
        assert out.startswith(f"{path}: paths.key_file: {key}: the signing key is ")
        assert problem in out
        assert err == f"{path}: 1 problem\n"
    os.chown(key, 0, 0)
    key.unlink()
    key.symlink_to(tmp_path / "elsewhere")
    assert main(["check-config", str(path)]) == 1
    assert "not a regular file" in capsys.readouterr().out


# ---------------------------------------------------------------------------
# slurm-mig keygen


def test_keygen_writes_a_private_key_the_hooks_can_load(tmp_path, capsys):
    key = tmp_path / "etc" / "key"
    rc = main(["keygen", str(key)])
    out, _ = capsys.readouterr()
    assert rc == 0 and out.startswith(f"{key}: new signing key written")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert len(load_key(key)) == 32
    rc2 = main(["keygen", str(tmp_path / "other")])
    assert rc2 == 0 and load_key(tmp_path / "other") != load_key(key)


def test_keygen_refuses_to_overwrite_an_existing_key(tmp_path, capsys):
    key = tmp_path / "key"
    key.write_text("precious\n")
    rc = main(["keygen", str(key)])
    _, err = capsys.readouterr()
    assert rc == 2
    assert err.startswith(f"slurm-mig: error: {key} already exists; not overwriting")
    assert "remove it first" in err and len(err.strip().splitlines()) == 1
    assert key.read_text() == "precious\n"


def test_keygen_defaults_to_the_configs_key_file(tmp_path, capsys, monkeypatch):
    key = tmp_path / "keys" / "slurm-mig.key"
    path = write(tmp_path, NODES + f"[paths]\nkey_file = '{key}'\n")
    assert main(["keygen", "--config", str(path)]) == 0
    assert len(load_key(key)) == 32
    key.unlink()
    monkeypatch.setenv("SLURM_MIG_CONFIG", str(path))
    assert main(["keygen"]) == 0
    assert key.exists()
    capsys.readouterr()


def test_keygen_without_any_config_uses_the_default_key_path(tmp_path, capsys, monkeypatch):
    default = tmp_path / "etc" / "slurm-mig" / "key"
    if DEFAULT_CONFIG_PATH.exists():
        pytest.skip("this machine has a real config at the default path")
    monkeypatch.setattr(config_mod, "DEFAULT_KEY_FILE", default)
    assert main(["keygen"]) == 0
    assert default.exists()
    capsys.readouterr()
    # a config chosen through the environment must exist: no silent fallback
    monkeypatch.setenv("SLURM_MIG_CONFIG", str(tmp_path / "no-config.toml"))
    assert main(["keygen"]) == 2
    assert "no-config.toml: no config file there" in capsys.readouterr().err


def test_keygen_with_a_broken_config_says_so_instead_of_guessing(tmp_path, capsys):
    path = write(tmp_path, NODES + "[planner]\nbatch_size = -1\ncycle = 0\n")
    assert main(["keygen", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"'slurm-mig check-config {path}'" in err and "2 problems" in err
    missing = tmp_path / "missing.toml"
    assert main(["keygen", "--config", str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "contrib/config.toml" in err


# ---------------------------------------------------------------------------
# [planner] objective


def test_objective_is_unset_by_default_and_takes_the_planner_names(tmp_path):
    from slurm_mig.planner.sequencing import OBJECTIVES

    assert config_mod.OBJECTIVES == OBJECTIVES  # the hooks do not import the planner
    assert load_config(write(tmp_path, NODES)).objective == ""  # balanced where taken
    for name in OBJECTIVES:
        path = write(tmp_path, NODES + f'[planner]\nobjective = "{name}"\n')
        assert load_config(path).objective == name


def test_an_objective_the_policy_does_not_take_is_refused_not_dropped(tmp_path, capsys):
    """The pair the policy's registry entry does not declare: one line from check-config
    and from the planner's start, naming the policies that take it."""
    path = write(tmp_path, NODES + '[planner]\nalgorithm = "baseline"\nobjective = "jct"\n')
    problems = check_config(path)
    assert problems == [
        f"{path}: planner.objective: policy 'baseline' takes no objective (it plans by its "
        "own rule); remove objective 'jct', or choose a policy that takes it: auto, far, "
        "far-pcie, adaptive"
    ]
    assert main(["check-config", str(path)]) == 1
    out, err = capsys.readouterr()
    assert problems[0] in out.splitlines() and "Traceback" not in out + err
    assert main(["planner", "--config", str(path)]) == 2
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [f"slurm-mig: error: {problems[0]}"]
    # far-pcie names its own objectives
    pcie = write(tmp_path, NODES + '[planner]\nalgorithm = "far-pcie"\nobjective = "balanced"\n')
    assert check_config(pcie) == [
        f"{pcie}: planner.objective: policy 'far-pcie': objective 'balanced': choose "
        "makespan, jct, start or online"
    ]
    # left out, the policy's own rule: no problem for any policy
    for algorithm in ("baseline", "far-pcie", "adaptive", "static"):
        path = write(tmp_path, NODES + f'[planner]\nalgorithm = "{algorithm}"\n')
        assert check_config(path) == []


def test_a_bad_objective_is_one_clear_line(tmp_path, capsys):
    path = write(tmp_path, NODES + '[planner]\nobjective = "jtc"\n')
    problems = check_config(path)
    assert problems == [
        f"{path}: planner.objective: unknown value 'jtc' (did you mean 'jct'?); "
        "choose one of 'makespan', 'jct', 'balanced'"
    ]
    rc = main(["check-config", str(path)])
    out, err = capsys.readouterr()
    assert rc == 1 and out.splitlines() == problems and "Traceback" not in out + err
    bad = write(tmp_path, NODES + "[planner]\nobjective = 1\n")
    assert check_config(bad) == [
        f'{bad}: planner.objective: must be a string in quotes, got 1; write e.g. "balanced"'
    ]


# ---------------------------------------------------------------------------
# [planner] upsize


def test_upsize_is_off_by_default_and_only_for_the_policies_that_move_jobs(tmp_path):
    from slurm_mig.planner.registry import get_policy

    assert load_config(write(tmp_path, NODES)).upsize == 0.0
    path = write(tmp_path, NODES + "[planner]\nupsize = 600\n")
    assert load_config(path).upsize == 600.0 and check_config(path) == []
    for name in config_mod.UPSIZE_POLICIES:  # each takes the option
        assert get_policy(name, upsize=600.0).upsize == 600.0
    other = write(tmp_path, NODES + '[planner]\nalgorithm = "far"\nupsize = 600\n')
    assert check_config(other) == [
        f"{other}: planner.upsize: policy 'far' does not move jobs; upsize is for adaptive: "
        "set algorithm to it, or upsize to 0"
    ]
    off = write(tmp_path, NODES + '[planner]\nalgorithm = "far"\nupsize = 0\n')
    assert check_config(off) == []
    for bad, why in (("-1", "between 0 and 86400"), ("1e9", "between 0"), ("nan", "finite")):
        path = write(tmp_path, NODES + f"[planner]\nupsize = {bad}\n")
        (line,) = check_config(path)
        assert line.startswith(f"{path}: planner.upsize: ") and why in line


def test_the_daemon_passes_the_objective_to_a_policy_that_takes_one():
    from slurm_mig.planner.sequencing import objective_options

    c = config_from_dict({"nodes": {"x": ["A100"]}, "planner": {"objective": "jct"}})
    assert objective_options(c.algorithm, c.objective) == {"objective": "jct"}
    # policies without the option plan by their own rule; a policy not installed is no error
    assert objective_options("baseline", c.objective) == {}
    assert objective_options("far-pcie", "balanced") == {}  # its names: makespan, jct, ...
