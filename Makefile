# Entry points: `make demo` (the five-minute first look), `make test` (the suite) and `make tables` (the five
# papers' tables on the synthetic world). Each builds its own virtual environment (`make venv` alone builds it).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_DIR ?= out/demo
TABLES_DIR ?= out/tables

.PHONY: demo tables test lint venv browser clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,clip,hf]'
	touch $(STAMP)

# The report's browser test needs Chromium (Debian's `chromium`): installed here when absent and apt-get works
# as root; a failed install never fails the tests (that test then skips and says why).
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1; } || \
		echo "make: chromium is not installed; the report's browser test will be skipped" >&2

# The suite runs in TEST_WORKERS processes (pytest-xdist), each test file whole in one of them (its module
# fixtures built once), in the order tests/conftest.py sets (the long end-to-end files first; xdist would
# otherwise start the files with the most tests first); most tests wait on subprocesses and file I/O, so two
# processes on two cores nearly halve the time.
TEST_WORKERS ?= 2

test: $(STAMP) browser
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests

lint: $(STAMP)
	$(BIN)/ruff check .

demo: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" bash examples/demo/demo.sh $(DEMO_DIR)

tables: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" bash examples/tables.sh $(TABLES_DIR)

clean:
	rm -rf $(VENV) out
