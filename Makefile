# The two commands of the README: `make reproduce` (the main job) and `make test`.
PYTHON ?= python3
PROFILE ?= quick
NBVAL = --nbval-lax --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: setup reproduce test test-fast test-notebooks test-browser bench

setup:
	PYTHON=$(PYTHON) bash scripts/setup.sh

# every notebooks/*.ipynb through papermill, one at a time -> results/executed/<profile>/, REPORT.md
reproduce: setup
	$(PYTHON) -m fedlib reproduce --profile $(PROFILE)

# unit and integration tests (one notebook opened in JupyterLab in Chromium and run there under smoke included),
# then every notebook under the smoke profile with nbval (a failing notebook fails the target); the set-up installs
# fedlib, so the kernels nbval and JupyterLab start in notebooks/ import it without PYTHONPATH.
test: setup
	$(PYTHON) -m pytest -q tests
	$(MAKE) --no-print-directory test-notebooks PYTHON=$(PYTHON)

# the tests a developer runs in a loop: all but those marked slow or browser, without the set-up step, the notebooks,
# the plugins it needs not (nbval, hypothesis) and pytest's closing garbage-collection passes (seconds on 2 cores)
test-fast:
	$(PYTHON) -m pytest -q -m "not slow and not browser" -p no:nbval -p no:hypothesispytest -p no:unraisableexception tests

test-notebooks:
	@if ls notebooks/*.ipynb >/dev/null 2>&1; then \
	  FEDLIB_PROFILE=smoke $(PYTHON) -m pytest -q $(NBVAL) notebooks; \
	else echo "test-notebooks: no notebooks in notebooks/ yet"; fi

# every notebook opened in JupyterLab and run to the end in Chromium under smoke (about a minute each on 2 cores)
test-browser: setup
	FEDLIB_BROWSER_NOTEBOOKS=all $(PYTHON) -m pytest -q -m browser tests/papers/test_notebooks_browser.py

bench: setup
	$(PYTHON) -m fedlib.bench
