# Two commands from a fresh machine: `make run` and `make test`.
# Both create .venv and install the project when it is missing.
# Every path is the checkout's, so `make -f /path/to/Makefile run` works from any directory
# (docs/setup.md): the demo writes the checkout's data/demo.
ROOT   := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
PYTHON ?= python3.11
VENV   := $(ROOT)/.venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# pytest workers: five on the 2-core reference machine. A whole trial mostly waits on
# time-scaled motion, so more workers than cores fill that wait (docs/testing.md,
# "Workers": four kept the cores 82-84 % busy, five 90-91 %); five peaked at 9 GB of memory.
WORKERS ?= 5
# The suite starts hundreds of short Python processes; with PYTHONDONTWRITEBYTECODE set (as
# on this machine) each compiled the project's sources again, and each worker re-wrote
# every test module's asserts: the suite writes byte-code caches, Python's default.
# One thread each for OpenCV's and OpenBLAS's pools, in the workers and every process they
# start: five workers already keep both cores busy, and OpenCV's pool spin-waits between calls
# (66,000 sched_yield calls in one 9-s trial; docs/testing.md, "Thread pools").
TEST_THREADS := OPENCV_FOR_THREADS_NUM=1 OPENBLAS_NUM_THREADS=1
# Files go to the workers in the order tests/conftest.py sorts them (the costliest by their
# markers first); xdist's own order (most tests first) left the long chaos files for the end.
PYTEST := cd $(ROOT) && env -u PYTHONDONTWRITEBYTECODE $(TEST_THREADS) $(BIN)/python -m pytest -n $(WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: run test test-fast test-chaos bench lint venv clean report-check viewer-check lerobot-check robot-check rollout-check family-check replay-check

$(STAMP): $(ROOT)/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '$(ROOT)[dev]'
	@touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	cd $(ROOT) && $(BIN)/python -m mecharm.tools.demo --data-root $(ROOT)/data/demo

test: $(STAMP)
	$(PYTEST)

test-fast: $(STAMP)
	$(PYTEST) -m "not slow and not chaos"

test-chaos: $(STAMP)
	$(PYTEST) -m chaos -rs

# Every bench quiet, then the UNDER_LOAD ones beside CPU burners; then docs/benchmarks.md
# is rendered from that one run (bench/report.py refuses results of mixed runs).
bench: $(STAMP)
	cd $(ROOT) && $(BIN)/python -m bench
	cd $(ROOT) && $(BIN)/python -m bench.report

# Not part of `make test`: renders the run report in headless Chromium (Debian's package,
# installed when missing and run as root) and checks the DOM and the page's loads;
# docs/report.md. DATA_ROOT=path reports on an existing data root instead of a fresh demo.
# The check is development code (mecharm_dev/, not installed): PYTHONPATH finds it in the checkout.
report-check: $(STAMP)
	PYTHONPATH=$(ROOT) $(BIN)/python -m mecharm_dev.browser_check $(if $(DATA_ROOT),--root $(DATA_ROOT))

# Not part of `make test`: a trial in Rerun's web viewer in headless Chromium, no ffmpeg on
# PATH (docs/viewing.md, "Checked in a browser"). RUN=run folder, else a fresh demo trial.
viewer-check: $(STAMP)
	PYTHONPATH=$(ROOT) $(BIN)/python -m mecharm_dev.viewer_check $(if $(RUN),--run $(RUN))

# Not part of `make test`: loads, filters, deletes from and merges our datasets with the real
# lerobot 0.4.x in its own venv (created the first time, ~15 min; docs/lerobot-check.md).
# DATA_ROOT=path checks an existing data root as rig A; LEROBOT_VENV=path uses that venv.
lerobot-check: $(STAMP)
	cd $(ROOT) && $(BIN)/python -m mecharm_dev.lerobot_check $(if $(LEROBOT_VENV),--venv $(LEROBOT_VENV)) $(if $(DATA_ROOT),--root $(DATA_ROOT))

lint: $(STAMP)
	cd $(ROOT) && $(BIN)/ruff check .
	cd $(ROOT) && $(BIN)/ruff format --check .
	cd $(ROOT) && $(BIN)/mypy

clean:
	cd $(ROOT) && rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache bench/results testcpu-out
	find $(ROOT) -name __pycache__ -not -path "$(VENV)/*" -prune -exec rm -rf {} +

# the rig as a LeRobot robot with the real lerobot (docs/lerobot-robot.md): the plugin and the
# project installed into the lerobot venv (make lerobot-check creates it, ~15 min the first time)
LEROBOT_PY = $(if $(LEROBOT_VENV),$(LEROBOT_VENV),$(ROOT)/.lerobot-venv)/bin/python
robot-check:
	@test -x $(LEROBOT_PY) || { echo "no lerobot venv at $(LEROBOT_PY): run make lerobot-check first (it creates one) or pass LEROBOT_VENV=DIR"; exit 2; }
	cd $(ROOT) && $(LEROBOT_PY) -m pip install --quiet -e . -e ./plugins/lerobot_robot_mecharm -e ./plugins/lerobot_camera_mecharm -e ./plugins/lerobot_teleoperator_mecharm
	cd $(ROOT) && $(LEROBOT_PY) -m mecharm_dev.robot_check

# a policy trained by lerobot-train on exported demonstrations, evaluated as rollouts on the
# simulated rig (docs/rollouts.md); the rig runs in this project's venv, lerobot in its own
rollout-check: $(STAMP)
	@test -x $(LEROBOT_PY) || { echo "no lerobot venv at $(LEROBOT_PY): run make lerobot-check first (it creates one) or pass LEROBOT_VENV=DIR"; exit 2; }
	cd $(ROOT) && $(LEROBOT_PY) -m pip install --quiet -e '.[runtime,sim,recorder]'
	cd $(ROOT) && $(LEROBOT_PY) -m mecharm_dev.rollout_check --project-python $(BIN)/python

# an export and a lerobot-record dataset of this robot merged by lerobot's own tool
# (docs/lerobot-robot.md, "One dataset family")
family-check: $(STAMP)
	@test -x $(LEROBOT_PY) || { echo "no lerobot venv at $(LEROBOT_PY): run make lerobot-check first (it creates one) or pass LEROBOT_VENV=DIR"; exit 2; }
	cd $(ROOT) && $(LEROBOT_PY) -m pip install --quiet -e . -e ./plugins/lerobot_robot_mecharm -e ./plugins/lerobot_camera_mecharm -e ./plugins/lerobot_teleoperator_mecharm
	cd $(ROOT) && $(LEROBOT_PY) -m mecharm_dev.family_check --project-python $(BIN)/python

# lerobot-replay of an exported episode on the simulated rig: the commanded path against the
# dataset's actions, and where the block ended (docs/lerobot-robot.md, "Replaying an exported episode")
replay-check: $(STAMP)
	@test -x $(LEROBOT_PY) || { echo "no lerobot venv at $(LEROBOT_PY): run make lerobot-check first (it creates one) or pass LEROBOT_VENV=DIR"; exit 2; }
	cd $(ROOT) && $(LEROBOT_PY) -m pip install --quiet -e . -e ./plugins/lerobot_robot_mecharm -e ./plugins/lerobot_camera_mecharm -e ./plugins/lerobot_teleoperator_mecharm
	cd $(ROOT) && $(LEROBOT_PY) -m mecharm_dev.replay_check --project-python $(BIN)/python
