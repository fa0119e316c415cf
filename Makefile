# The two commands of the README: `make reproduce` (the main job) and `make test`.
PYTHON ?= python3
PROFILE ?= quick
NBVAL = --nbval-lax --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: setup reproduce test test-notebooks bench

setup:
	PYTHON=$(PYTHON) bash scripts/setup.sh

# every notebooks/*.ipynb through papermill, one at a time -> results/executed/<profile>/, REPORT.md
reproduce: setup
	$(PYTHON) -m fedlib reproduce --profile $(PROFILE)

# unit tests, then every notebook under the smoke profile with nbval (a failing notebook fails the target);
# nbval starts kernels in notebooks/, so the checkout goes on PYTHONPATH for `import fedlib`
test: setup
	$(PYTHON) -m pytest -q tests
	$(MAKE) --no-print-directory test-notebooks PYTHON=$(PYTHON)

test-notebooks:
	@if ls notebooks/*.ipynb >/dev/null 2>&1; then \
	  PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} FEDLIB_PROFILE=smoke $(PYTHON) -m pytest -q $(NBVAL) notebooks; \
	else echo "test-notebooks: no notebooks in notebooks/ yet"; fi

bench: setup
	$(PYTHON) -m fedlib.bench
