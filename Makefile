# Two commands for a newcomer: `make run` (the demo) and `make test`.
# Both create .venv on first use and install the pinned requirements; `make venv` does only that.
# `make test` lints (`make lint`: ruff, configured in pyproject.toml) and then runs every test
# on TEST_WORKERS workers (pytest-xdist; each test file on one worker), listing the 15
# slowest; the tests marked `alone` (real-time deadlines of live nodes) run after that, one at
# a time. Three workers on two cores: many tests spend part of their time waiting on the wall
# clock (episodes in real time, processes starting, DDS discovery), and a third worker keeps
# both cores busy meanwhile.
# `make test-fast` lints and runs only the tests marked `unit` (no rclpy/DDS, no long commands;
# tests/conftest.py makes every test carry one of the markers unit, ros, e2e), less those also
# marked `slow`: a quick check while editing, not a replacement for `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TEST_WORKERS ?= 3
# The files that hold `alone` tests: the second pass collects only those (collecting every
# test file takes seconds).
ALONE_FILES = $(shell grep -l "mark\.alone" tests/test_*.py)
# The stamp depends on the requirement files, so editing them reinstalls; otherwise nothing is redone.
STAMP := $(VENV)/.arm_act-installed

.PHONY: venv run lint test test-fast bench clean-venv

venv: $(STAMP)

$(STAMP): requirements.txt constraints.txt setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt -c constraints.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

run: venv
	$(VENV)/bin/arm-act demo

lint: venv
	$(VENV)/bin/ruff check .

test: lint
	ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15 -m "not alone" tests
	ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST $(PY) -m pytest -q -m alone $(ALONE_FILES)

test-fast: lint
	ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST $(PY) -m pytest -q -n 2 --dist loadfile -m "unit and not slow" tests

bench: venv
	$(VENV)/bin/arm-act bench

clean-venv:
	rm -rf $(VENV)
