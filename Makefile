# The two commands of the README: `make reproduce` (the main job) and `make test`.
PYTHON ?= python3
PROFILE ?= quick

.PHONY: setup reproduce test bench

setup:
	PYTHON=$(PYTHON) bash scripts/setup.sh

reproduce: setup
	$(PYTHON) -m fedlib reproduce --profile $(PROFILE)

test: setup
	$(PYTHON) -m pytest -q tests

bench: setup
	$(PYTHON) -m fedlib.bench
