# slurm-mig developer tasks. `make test` is what CI runs (.ci/run); it works from a fresh
# clone on Debian 12 as root (or with sudo) and installs everything it needs.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Debian packages for a real Slurm on loopback (the e2e tests start one); slurmdbd and
# mariadb-server for the clusters with accounting (LocalSlurm(accounting=True)), whose
# MariaDB server always is the host's, for every release's slurmdbd.
SLURM_PKGS := slurmctld slurmd slurm-client munge slurmdbd mariadb-server
# Debian packages the observability tests drive: tmux (status on a terminal screen) and
# headless Chromium (the web page); each is installed where its command is missing.
VIEW_PKGS := tmux chromium
# promtool checks and unit-tests the Prometheus alert rules (contrib/slurm-mig-alerts.yml,
# tests/daemon/test_alerts.py); Debian ships it in the prometheus package.
ALERT_PKGS := prometheus
# rpmbuild and rpmlint for `make rpm` (and its test in tests/e2e/test_package.py);
# Debian ships both.
RPM_PKGS := rpm rpmlint
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# $(call apt_install,PACKAGES): apt-get install, quietly; where that fails (stale lists),
# apt-get update and once more, loudly
APT_GET := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get
apt_install = $(APT_GET) install -y -q --no-install-recommends $(1) >/dev/null 2>&1 || { \
	$(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends $(1); }
# Other Slurm releases for the e2e suite: debootstrapped Debian roots, cached in
# /var/cache/slurm-mig/roots ($$SLURM_MIG_ROOTS) across clones. trixie: 24.11, sid: 26.05.
SLURM_ROOTS := trixie sid

.PHONY: venv test demo bench lint format clean clean-roots slurm-packages slurm-roots view-packages \
	alert-packages rpm-packages deb rpm

# `make` alone builds the manual page and the shell completion (`docs`, below).
all: docs

# Stamps make re-runs instant; they are redone when the package metadata changes.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/pip install --quiet --disable-pip-version-check -e .
	touch $@

$(VENV)/.installed-test: $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@ $(VENV)/.installed

venv: $(VENV)/.installed-test

# Installs whichever of SLURM_PKGS is missing, with a policy-rc.d that exits 101 while
# apt-get runs (removed afterwards, unless it was there before): Debian's post-install
# scripts must not start slurmctld, slurmdbd or MariaDB on the host.
slurm-packages:
	@missing=""; for pkg in $(SLURM_PKGS); do \
		dpkg -s $$pkg 2>/dev/null | grep -q "^Status: install ok installed" \
			|| missing="$$missing $$pkg"; \
	done; \
	if [ -z "$$missing" ]; then echo "slurm packages: present"; \
	else \
		echo "slurm packages: installing$$missing"; \
		policy=/usr/sbin/policy-rc.d; own=""; \
		if [ ! -e $$policy ]; then \
			printf '#!/bin/sh\nexit 101\n' | $(SUDO) tee $$policy >/dev/null && \
			$(SUDO) chmod 755 $$policy && own=1; \
		fi; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -q && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			--no-install-recommends $$missing; status=$$?; \
		[ -z "$$own" ] || $(SUDO) rm -f $$policy; \
		exit $$status; \
	fi

view-packages:
	@missing=""; for pkg in $(VIEW_PKGS); do \
		command -v $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	if [ -z "$$missing" ]; then echo "view packages: present"; \
	else \
		echo "view packages: installing$$missing"; \
		$(call apt_install,$$missing); \
	fi

alert-packages:
	@if command -v promtool >/dev/null 2>&1; then echo "alert packages: present"; \
	else \
		echo "alert packages: installing $(ALERT_PKGS)"; \
		$(call apt_install,$(ALERT_PKGS)); \
	fi

rpm-packages:
	@if command -v rpmbuild >/dev/null 2>&1 && command -v rpmlint >/dev/null 2>&1; then \
		echo "rpm packages: present"; \
	else \
		echo "rpm packages: installing $(RPM_PKGS)"; \
		$(call apt_install,$(RPM_PKGS)); \
	fi

# Builds the roots that are missing (about 30 s each; as root only, where LocalSlurm can
# run at all). Outside CI a root that cannot be built is skipped by the e2e suite with
# the reason; on CI ($$CI set) it is a failure.
slurm-roots: $(VENV)/.installed
	@if [ "$$(id -u)" != 0 ]; then \
		echo "slurm roots: not root, not built (the e2e suite needs root anyway)"; \
	else \
		if ! command -v debootstrap >/dev/null 2>&1; then \
			env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
				debootstrap >/dev/null 2>&1 || { \
			env DEBIAN_FRONTEND=noninteractive apt-get update -q && \
			env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
				debootstrap; }; \
		fi; \
		$(BIN)/python -m slurm_mig.demo.slurmroot build $(SLURM_ROOTS) || [ -z "$$CI" ]; \
	fi

# The unit tests and the e2e suite on the host's Slurm (22.05 on Debian 12) side by side
# (the unit tests start no Slurm; their report follows the e2e one, from
# test-artifacts/unit.log), then the e2e suite once per root's release (one Slurm at a
# time: the clusters' nodes share names), each in a random order (pyproject.toml):
# `make test SEED=N` repeats one. --durations names the slowest tests of each run (CI's
# whole run should stay under 50 min). Every process the run starts carries its mark
# ($SLURM_MIG_TEST_RUN, fresh per run; the clusters also register their directories):
# at the end, and on Ctrl-C, slurm_mig.demo.leftovers names and ends what of this run
# still runs (never another run's) and then fails the run.
test: SEED := $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
test: RUN := $(shell od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
test: slurm-packages view-packages alert-packages rpm-packages venv slurm-roots
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@echo "== test order: --randomly-seed=$(SEED) (make test SEED=$(SEED) repeats it)"
	@mkdir -p test-artifacts; status=0; \
	export SLURM_MIG_TEST_RUN=run$(RUN); \
	trap '$(BIN)/python -m slurm_mig.demo.leftovers; exit 130' INT TERM; \
	$(BIN)/pytest -q --durations=10 --randomly-seed=$(SEED) --ignore=tests/e2e \
		>test-artifacts/unit.log 2>&1 & unit=$$!; \
	echo "== tests/e2e on the host's Slurm (the unit tests run beside it)"; \
	$(BIN)/pytest -q --durations=10 --randomly-seed=$(SEED) tests/e2e || status=1; \
	wait $$unit || status=1; \
	echo "== the unit tests (test-artifacts/unit.log)"; cat test-artifacts/unit.log; \
	for release in $(SLURM_ROOTS); do \
		echo "== tests/e2e on the Slurm of Debian $$release"; \
		SLURM_MIG_SLURM=$$release $(BIN)/pytest -q --durations=10 --randomly-seed=$(SEED) tests/e2e || status=1; \
	done; \
	echo "== processes of this run still running (slurm_mig.demo.leftovers)"; \
	$(BIN)/python -m slurm_mig.demo.leftovers || status=1; \
	exit $$status

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# As root (where apt-get can install Slurm) the demo also runs the batch through a real
# Slurm on loopback; otherwise it is the plan-only demo.
# `make demo LIVE=no` is the plan-only demo, as root too: nothing is installed on the host.
LIVE ?= yes
demo: $(VENV)/.installed
	@if [ "$$(id -u)" = 0 ] && [ "$(LIVE)" != no ]; then \
		echo "make demo: as root the demo also runs the batch through a real Slurm on loopback;"; \
		echo "  it installs Debian's $(SLURM_PKGS) where missing (their services are not"; \
		echo "  started on this host). 'make demo LIVE=no' runs the demo without them."; \
		$(MAKE) --no-print-directory slurm-packages && $(BIN)/slurm-mig demo --live; \
	else \
		$(BIN)/slurm-mig demo; \
	fi

# Tracked benchmarks (benchmarks/tracked, pytest-benchmark; not part of `make test` or
# CI): `make bench` times them, compares the figures with those stored in
# benchmarks/baseline/ and names every one more than BENCH_THRESHOLD (20 %) worse, exiting 1
# then; `make bench-save` stores a run as the new figures after an intended change.
# `make bench-scripts` runs the scripts under benchmarks/ that print figures (slow).
BENCH_BASELINE  := benchmarks/baseline/figures.json
BENCH_RUN       := .benchmarks/last-run.json
BENCH_THRESHOLD ?= 0.20
.PHONY: bench-save bench-scripts
BENCH_PYTEST = $(BIN)/python -m pytest benchmarks/tracked -q -o addopts= -p no:randomly \
	--benchmark-sort=name --benchmark-columns=min,median,mean,rounds \
	--benchmark-json=$(BENCH_RUN)

$(VENV)/.installed-bench: $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[bench]'
	touch $@ $(VENV)/.installed

bench: $(VENV)/.installed-bench
	@mkdir -p $(dir $(BENCH_RUN)); rm -f $(BENCH_RUN)
	@echo "== tracked benchmarks; load average $$(cut -d' ' -f1-3 /proc/loadavg) on $$(nproc) CPUs"
	@$(BENCH_PYTEST); status=$$?; \
	echo "== compared with $(BENCH_BASELINE)"; \
	$(BIN)/python benchmarks/tracked/compare.py --threshold $(BENCH_THRESHOLD) \
		$(BENCH_BASELINE) $(BENCH_RUN) || status=1; \
	exit $$status

bench-save: $(VENV)/.installed-bench
	@mkdir -p $(dir $(BENCH_RUN)); rm -f $(BENCH_RUN)
	@echo "== tracked benchmarks; load average $$(cut -d' ' -f1-3 /proc/loadavg) on $$(nproc) CPUs"
	@$(BENCH_PYTEST)
	$(BIN)/python benchmarks/tracked/compare.py --save $(BENCH_RUN) $(BENCH_BASELINE)

bench-scripts: $(VENV)/.installed
	@set -e; found=0; \
	for script in benchmarks/*.py; do \
		[ -e "$$script" ] || continue; found=1; \
		echo "== $$script"; $(BIN)/python "$$script"; \
	done; \
	[ $$found = 1 ] || echo "no scripts under benchmarks/"

clean-roots:
	rm -rf "$${SLURM_MIG_ROOTS:-/var/cache/slurm-mig/roots}"

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .hypothesis rodinia-far-gantt.png \
		test-artifacts
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# The manual page and the bash and zsh completion, generated from the argument parsers
# (argparse-manpage and shtab, the docs extra) under $(DOCS_DIR), laid out as under
# /usr/local/share: install them with `cp -r build/share/. /usr/local/share/`.
DOCS_DIR := build/share
.PHONY: all docs man completion

$(VENV)/.installed-docs: $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[docs]'
	touch $@ $(VENV)/.installed

docs: man completion

man: $(VENV)/.installed-docs
	@mkdir -p $(DOCS_DIR)/man/man1
	$(BIN)/argparse-manpage --module slurm_mig.cli --function build_parser --prog slurm-mig \
		--version "$$($(BIN)/python -c 'from slurm_mig.cli.common import version; print(version())')" \
		--project-name slurm-mig --manual-title "slurm-mig manual" \
		--description "plan NVIDIA MIG repartitioning for Slurm GPU jobs" \
		--output $(DOCS_DIR)/man/man1/slurm-mig.1
	@# a help line that starts with ' would read as a troff request: \& before it
	sed -i 's/^\x27/\\\&\x27/' $(DOCS_DIR)/man/man1/slurm-mig.1

completion: $(VENV)/.installed-docs
	@mkdir -p $(DOCS_DIR)/bash-completion/completions $(DOCS_DIR)/zsh/site-functions
	$(BIN)/shtab --shell=bash slurm_mig.cli.build_parser \
		-o $(DOCS_DIR)/bash-completion/completions/slurm-mig
	$(BIN)/shtab --shell=zsh slurm_mig.cli.build_parser -o $(DOCS_DIR)/zsh/site-functions/_slurm-mig

# The packages (packaging/build.py): the application in a private environment in
# /opt/slurm-mig laid out for the target's Python, with the units, the man page and
# completion, and /etc/slurm-mig/config.toml as a config file. `make deb` builds for this
# machine's python3 (DEB_PYTHON=3.13 for Debian 13); `make rpm` for EL 9's python3.11
# (RPM_PYTHON=3.12 for EL 10) and checks the result with rpmlint. Both land in dist/.
DEB_PYTHON ?= $(shell python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
RPM_PYTHON ?= 3.11

deb: $(VENV)/.installed-docs
	$(BIN)/python packaging/build.py deb --python $(DEB_PYTHON) --out dist

rpm: $(VENV)/.installed-docs rpm-packages
	rm -f dist/slurm-mig-*.rpm
	$(BIN)/python packaging/build.py rpm --python $(RPM_PYTHON) --out dist
	rpmlint -r packaging/slurm-mig.rpmlintrc dist/slurm-mig-*.rpm
