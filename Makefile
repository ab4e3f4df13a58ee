# Two commands for a newcomer: `make run` (the demo) and `make test`.
# Both create .venv on first use and install the pinned requirements; `make venv` does only that.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The stamp depends on the requirement files, so editing them reinstalls; otherwise nothing is redone.
STAMP := $(VENV)/.arm_act-installed

.PHONY: venv run test test-fast bench clean-venv

venv: $(STAMP)

$(STAMP): requirements.txt constraints.txt setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt -c constraints.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

run: venv
	$(VENV)/bin/arm-act demo

test: venv
	ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST $(PY) -m pytest -q tests

bench: venv
	$(VENV)/bin/arm-act bench

clean-venv:
	rm -rf $(VENV)
